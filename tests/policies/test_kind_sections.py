"""Kind sections and held-out expectations in the one policy schema (schema_version 1, additive)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from policies import PolicyInvalidError, build_policy, check_content_hash, choose_for_budget, choose_for_tier
from policies.decision import budget_index
from policies.kinds import kind_policy, kind_tiers, served_kinds
from policies.store import dump_policy, load_policy, parse_policy
from tests.support.policy_files import heldout_expectation

HELDOUT = heldout_expectation(
    cost_usd=(0.0005, 0.0004, 0.0006), quality=(0.66, 0.6, 0.72), escalation_rate=(0.41, 0.35, 0.47)
)


def tool_section(document: dict[str, Any]) -> dict[str, Any]:
    """A tool-call section: the same tiers on other models (tool-small -> large), its own scorer."""
    section = {
        "models": {
            "tool-small": {"mean_cost_usd": 0.0002, "quality": 0.6},
            "large": {"mean_cost_usd": 0.001, "quality": 0.9},
        },
        "default_tier": document["default_tier"],
        "tiers": copy.deepcopy(document["tiers"]),
        "envelope": [
            {"cost_usd": 0.0002, "quality": 0.6, "models": ["tool-small"], "thresholds": []},
            {"cost_usd": 0.001, "quality": 0.9, "models": ["large"], "thresholds": []},
        ],
        "scorer": {"name": "min_probability", "top_k": 3},
    }
    for tier in section["tiers"].values():
        for route in tier["routes"]:
            route["models"] = ["tool-small" if m == "small" else m for m in route["models"]]
    return section


def test_a_policy_written_before_kinds_and_heldout_loads_with_its_own_id(repo_root: Path) -> None:
    path = repo_root / "policies" / "local-demo.json"
    policy = load_policy(path)
    check_content_hash(policy)  # the id is still the hash of the content as written
    assert policy.kinds is None
    assert json.loads(dump_policy(policy)).keys() == json.loads(path.read_text()).keys()


def test_absent_optional_fields_are_not_written_or_hashed(policy_document: dict[str, Any]) -> None:
    plain = build_policy(policy_document)
    explicit = copy.deepcopy(policy_document)
    explicit["kinds"] = None
    explicit["tiers"]["balanced"]["expected"]["heldout"] = None
    assert build_policy(explicit).policy_id == plain.policy_id
    written = json.loads(dump_policy(plain))
    assert "kinds" not in written and "heldout" not in written["tiers"]["balanced"]["expected"]


def test_heldout_expectations_round_trip_and_change_the_id(policy_document: dict[str, Any]) -> None:
    plain = build_policy(policy_document)
    policy_document["tiers"]["balanced"]["expected"]["heldout"] = HELDOUT
    with_heldout = build_policy(policy_document)
    assert with_heldout.policy_id != plain.policy_id
    again = parse_policy(dump_policy(with_heldout))
    check_content_hash(again)
    heldout = again.tiers["balanced"].expected.heldout
    assert heldout is not None and heldout.splits == 50 and heldout.quality.low == 0.6


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"quality": {"mean": 0.5, "low": 0.7, "high": 0.6}}, "low 0.7 is above high 0.6"),
        ({"escalation_rate": {"mean": 0.5, "low": 0.4, "high": 1.2}}, "must lie in \\[0, 1\\]"),
        ({"splits": 0}, "splits"),
        ({"test_fraction": 1.0}, "test_fraction"),
    ],
)
def test_malformed_heldout_expectations_are_refused(
    policy_document: dict[str, Any], change: dict[str, Any], message: str
) -> None:
    policy_document["tiers"]["balanced"]["expected"]["heldout"] = {**HELDOUT, **change}
    with pytest.raises(PolicyInvalidError, match=message):
        build_policy(policy_document)


def test_a_kind_section_is_served_for_its_kind_and_the_top_level_for_the_others(
    policy_document: dict[str, Any],
) -> None:
    policy_document["kinds"] = {"tool_call": tool_section(policy_document)}
    policy = parse_policy(dump_policy(build_policy(policy_document)))
    tools = kind_policy(policy, "tool_call")
    assert tools is kind_policy(policy, "tool_call")  # one view per policy: the budget index is cached
    assert choose_for_tier(tools, "balanced").route.models == ["tool-small", "large"]
    assert choose_for_tier(policy, "balanced").route.models == ["small", "large"]
    assert choose_for_budget(tools, 0.0003).route.models == ["tool-small"]
    assert tools.scorer.name == "min_probability" and policy.scorer.name == "mean_token_negentropy"
    assert tools.policy_id == policy.policy_id and tools.kinds is None
    for other in ("text", "structured_output"):
        assert kind_policy(policy, other) is policy
    assert served_kinds(policy) == ["text", "tool_call"]
    assert {(kind, name) for kind, name, _ in kind_tiers(policy)} == {
        (kind, name) for kind in ("text", "tool_call") for name in ("balanced", "economy")
    }


def test_a_policys_kind_views_are_its_own_and_a_copy_builds_its_own(
    policy_document: dict[str, Any],
) -> None:
    policy_document["kinds"] = {"tool_call": tool_section(policy_document)}
    policy = build_policy(policy_document)
    tools = kind_policy(policy, "tool_call")
    assert budget_index(tools) is budget_index(kind_policy(policy, "tool_call"))
    renamed = policy.model_copy(update={"policy_id": "0" * 16})
    assert kind_policy(renamed, "tool_call").policy_id == "0" * 16  # not the original's view
    assert kind_policy(copy.deepcopy(policy), "tool_call") is not tools
    assert renamed == policy.model_copy(update={"policy_id": "0" * 16})  # equality ignores the views
    assert kind_policy(policy, "tool_call") is tools


def test_a_section_without_a_scorer_uses_the_top_levels(policy_document: dict[str, Any]) -> None:
    section = tool_section(policy_document)
    del section["scorer"]
    policy_document["kinds"] = {"tool_call": section}
    policy = build_policy(policy_document)
    assert kind_policy(policy, "tool_call").scorer == policy.scorer
    assert "scorer" not in json.loads(dump_policy(policy))["kinds"]["tool_call"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s["tiers"].pop("economy"), "must be the top level's"),
        (lambda s: s.update(default_tier="economy"), "must be the top level's"),
        (
            lambda s: s["tiers"]["balanced"]["routes"][0].update(models=["nope"], thresholds=[]),
            "unknown model",
        ),
        (lambda s: s["envelope"].reverse(), "kinds.tool_call: envelope points must be sorted"),
        (
            lambda s: s["tiers"]["balanced"]["routes"][0].update(thresholds=[-3.0]),
            "kinds.tool_call: tier 'balanced' route 1 stage 1 .* range \\[0, 1\\] of scorer min_probability",
        ),
    ],
)
def test_a_malformed_section_is_refused_with_its_kind_named(
    policy_document: dict[str, Any], edit: Any, message: str
) -> None:
    section = tool_section(policy_document)
    edit(section)
    policy_document["kinds"] = {"tool_call": section}
    with pytest.raises(PolicyInvalidError, match=message):
        build_policy(policy_document)


def test_only_tool_call_and_structured_output_may_have_a_section(policy_document: dict[str, Any]) -> None:
    policy_document["kinds"] = {"text": tool_section(policy_document)}
    with pytest.raises(PolicyInvalidError, match="kinds"):
        build_policy(policy_document)


def test_a_section_routing_to_an_unconfigured_model_or_scored_externally_cannot_be_served(
    policy_document: dict[str, Any],
) -> None:
    from publishing import check_servable

    policy_document["kinds"] = {"tool_call": tool_section(policy_document)}
    policy = build_policy(policy_document)
    check_servable(policy, ["small", "large", "tool-small"])
    with pytest.raises(PolicyInvalidError, match="routes to model\\(s\\) tool-small"):
        check_servable(policy, ["small", "large"])
    policy_document["kinds"]["tool_call"]["scorer"] = {"name": "external", "top_k": 1}
    with pytest.raises(PolicyInvalidError, match="external"):
        check_servable(build_policy(policy_document), None)
