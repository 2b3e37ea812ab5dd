"""policies.capabilities: the request fields per model, and what a scorer needs of the models it scores."""

from __future__ import annotations

from typing import Any

import pytest

from policies import ScorerSpec, build_policy
from policies.capabilities import (
    ModelCapabilities,
    capability_problems,
    logprob_fields,
    scorer_needs,
    stage_problems,
)
from policies.scorers import SCORERS

FULL = ModelCapabilities()
NONE = ModelCapabilities(logprobs=False)
CAPPED = ModelCapabilities(max_top_logprobs=5)


def test_logprob_fields_per_form_and_cap() -> None:
    assert logprob_fields(FULL, 15, chat=True) == {"logprobs": True, "top_logprobs": 15}
    assert logprob_fields(CAPPED, 15, chat=True) == {"logprobs": True, "top_logprobs": 5}
    assert logprob_fields(CAPPED, 3, chat=True) == {"logprobs": True, "top_logprobs": 3}
    integer = ModelCapabilities(logprobs_form="integer", max_top_logprobs=5)
    assert logprob_fields(integer, 15, chat=True) == {"logprobs": 5}
    assert logprob_fields(integer, 0, chat=True) == {"logprobs": 1}  # a count of 0 may read as "none"
    assert logprob_fields(CAPPED, 15, chat=False) == {"logprobs": 5}
    assert logprob_fields(NONE, 15, chat=True) == {} and logprob_fields(NONE, 15, chat=False) == {}


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_every_logprob_scorer_needs_the_scored_models_logprobs(name: str) -> None:
    problems = stage_problems(ScorerSpec(name=name, top_k=5), ["cheap", "strong"], {"cheap": NONE})
    assert problems == [
        "model cheap is declared without logprobs (capabilities.logprobs: false) "
        f"and scorer {name} needs them"
    ]


def test_only_scorers_made_of_alternatives_are_limited_by_the_cap() -> None:
    capped = {"cheap": ModelCapabilities(max_top_logprobs=3)}
    assert stage_problems(ScorerSpec(name="mean_token_negentropy", top_k=5), ["cheap", "x"], capped)
    assert stage_problems(ScorerSpec(name="probability_margin", top_k=5), ["cheap", "x"], capped)
    assert not stage_problems(ScorerSpec(name="mean_token_negentropy", top_k=3), ["cheap", "x"], capped)
    for chosen_only in ("min_probability", "sequence_probability", "mean_logprob"):
        assert not stage_problems(ScorerSpec(name=chosen_only, top_k=20), ["cheap", "x"], capped)
    # max_top_logprobs 0: the chosen tokens' logprobs only.
    zero = {"cheap": ModelCapabilities(max_top_logprobs=0)}
    assert not stage_problems(ScorerSpec(name="min_probability", top_k=5), ["cheap", "x"], zero)
    assert stage_problems(ScorerSpec(name="min_token_negentropy", top_k=2), ["cheap", "x"], zero)


def test_the_last_stage_is_never_scored_and_unconfigured_stages_are_left_to_the_route_check() -> None:
    scorer = ScorerSpec(name="min_probability")
    assert stage_problems(scorer, ["cheap", "strong"], {"strong": NONE}) == []
    assert stage_problems(scorer, ["strong"], {"strong": NONE}) == []
    assert stage_problems(scorer, ["unknown", "strong"], {"strong": FULL}) == []
    assert len(stage_problems(scorer, ["a", "b", "c"], {"a": NONE, "b": NONE, "c": NONE})) == 2


def blackbox(name: str, verifier_model: str | None = None, top_k: int = 10) -> ScorerSpec:
    """A black-box ScorerSpec with the settings its name requires (policies.schema)."""
    if name == "verifier":
        return ScorerSpec(name="verifier", top_k=top_k, verifier={"model": verifier_model or "judge"})
    if name == "consistency":
        return ScorerSpec(name="consistency", top_k=top_k, samples=2, temperature=0.7, equivalence="exact")
    return ScorerSpec(name="self_report", top_k=top_k)


@pytest.mark.parametrize("name", ["consistency", "self_report"])
def test_black_box_scorers_need_nothing_of_the_scored_model(name: str) -> None:
    assert scorer_needs(blackbox(name), "cheap") == []
    assert stage_problems(blackbox(name), ["cheap", "strong"], {"cheap": NONE, "strong": NONE}) == []


def test_a_verifier_needs_its_own_models_logprobs_and_alternatives() -> None:
    scorer = blackbox("verifier", "judge", top_k=10)
    declared = {"cheap": NONE, "strong": FULL, "judge": FULL}
    assert stage_problems(scorer, ["cheap", "strong"], declared) == []
    declared["judge"] = NONE
    assert stage_problems(scorer, ["cheap", "strong"], declared) == [
        "verifier model judge is declared without logprobs (capabilities.logprobs: false) "
        "and scorer verifier needs them"
    ]
    declared["judge"] = CAPPED
    assert "verifier model judge gives at most 5" in stage_problems(scorer, ["cheap", "strong"], declared)[0]
    del declared["judge"]
    assert stage_problems(scorer, ["cheap", "strong"], declared) == [
        "verifier model judge is not a configured model"
    ]


def test_an_unknown_scorer_is_taken_to_need_logprobs() -> None:
    # A name this version does not know (a policy from a newer one, read without validation).
    unknown = ScorerSpec.model_construct(name="something_new", top_k=7)
    assert scorer_needs(unknown, "cheap")[0].alternatives == 7
    assert scorer_needs(ScorerSpec(name="external"), "cheap") == []


def _policy_document(scorer: dict[str, Any]) -> dict[str, Any]:
    return {
        "scorer": scorer,
        "models": {
            "cheap": {"mean_cost_usd": 0.0001, "quality": 0.5},
            "strong": {"mean_cost_usd": 0.001, "quality": 0.8},
        },
        "default_tier": "t",
        "tiers": {
            "t": {
                "objective": {"max_cost_usd": 0.0006},
                "routes": [
                    {"weight": 0.5, "models": ["cheap", "strong"], "thresholds": [0.4]},
                    {"weight": 0.5, "models": ["strong"], "thresholds": []},
                ],
                "expected": {"cost_usd": 0.0005, "quality": 0.7, "escalation_rate": 0.4},
            }
        },
        "envelope": [
            {"cost_usd": 0.0004, "quality": 0.7, "models": ["cheap", "strong"], "thresholds": [0.4]},
        ],
    }


def test_policy_problems_name_tier_route_or_envelope_point_model_and_what_is_missing() -> None:
    policy = build_policy(_policy_document({"name": "mean_token_negentropy", "top_k": 8}))
    assert capability_problems(policy, {"cheap": FULL, "strong": NONE}) == []
    assert capability_problems(policy, {"cheap": CAPPED, "strong": FULL}) == [
        "tier 't' route 1 (cheap -> strong): scorer mean_token_negentropy reads top_k 8 alternatives per "
        "position and model cheap gives at most 5 (capabilities.max_top_logprobs)",
        "envelope point 1 (cheap -> strong): scorer mean_token_negentropy reads top_k 8 alternatives per "
        "position and model cheap gives at most 5 (capabilities.max_top_logprobs)",
    ]


def test_each_request_kinds_section_is_checked_with_its_own_scorer() -> None:
    # Each section of ``Policy.kinds`` may carry its own scorer, else it is scored with the top level's.
    document = _policy_document({"name": "min_probability", "top_k": 5})
    section = {k: document[k] for k in ("models", "default_tier", "tiers", "envelope")}
    document["kinds"] = {
        "tool_call": {**section, "envelope": [], "scorer": {"name": "probability_margin", "top_k": 8}},
        "structured_output": {**section, "envelope": []},
    }
    policy = build_policy(document)
    assert policy.kinds is not None and policy.kinds["structured_output"].scorer is None
    assert capability_problems(policy, {"cheap": CAPPED, "strong": FULL}) == [
        "kind tool_call tier 't' route 1 (cheap -> strong): scorer probability_margin reads top_k 8 "
        "alternatives per position and model cheap gives at most 5 (capabilities.max_top_logprobs)"
    ]
    missing = "model cheap is declared without logprobs (capabilities.logprobs: false)"
    assert capability_problems(policy, {"cheap": NONE, "strong": FULL}) == [
        f"tier 't' route 1 (cheap -> strong): {missing} and scorer min_probability needs them",
        f"envelope point 1 (cheap -> strong): {missing} and scorer min_probability needs them",
        "kind tool_call tier 't' route 1 (cheap -> strong): model cheap is declared without logprobs "
        "(capabilities.logprobs: false) and scorer probability_margin needs them",
        "kind structured_output tier 't' route 1 (cheap -> strong): model cheap is declared without "
        "logprobs (capabilities.logprobs: false) and scorer min_probability needs them",
    ]
