"""Black-box scorers (policies.blackbox): request bodies, scores from replies, the policy fields."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from pydantic import ValidationError

from policies import PolicyInvalidError, load_policy
from policies.blackbox import (
    SELF_REPORT_PROMPT,
    VERIFIER_PROMPT,
    consistency_score,
    first_position,
    question_text,
    sample_request,
    self_report_request,
    self_report_score,
    verifier_request,
    verifier_score,
    verifier_score_from_position,
    yes_no_mass,
)
from policies.schema import ModelStats, Policy, ScorerSpec
from policies.store import build_policy, check_content_hash, compute_policy_id, policy_as_document

QUESTION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+3?"}]


def reply(content: str, positions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": content}}
    if positions is not None:
        choice["logprobs"] = {"content": positions}
    return {"choices": [choice], "usage": {"prompt_tokens": 30, "completion_tokens": 1}}


def position(token: str, alternatives: dict[str, float]) -> dict[str, Any]:
    return {
        "token": token,
        "logprob": math.log(alternatives[token]),
        "bytes": list(token.encode()),
        "top_logprobs": [{"token": t, "logprob": math.log(p), "bytes": []} for t, p in alternatives.items()],
    }


def test_verifier_request_asks_one_token_with_alternatives_about_the_question_and_answer() -> None:
    body = verifier_request(QUESTION, "5", model="judge", prompt=VERIFIER_PROMPT, top_logprobs=10)
    assert body["model"] == "judge"
    assert (body["max_tokens"], body["temperature"], body["logprobs"], body["top_logprobs"]) == (
        1,
        0,
        True,
        10,
    )
    (message,) = body["messages"]
    assert "What is 2+3?" in message["content"] and "Proposed answer:\n5" in message["content"]
    assert "Be brief." not in message["content"]  # the stage's system prompt is not the question


def test_verifier_prompt_replacement_leaves_other_braces_alone() -> None:
    body = verifier_request(
        [{"role": "user", "content": "solve {x}"}],
        "{}",
        model="m",
        prompt="Q {question} A {answer} {other}",
        top_logprobs=5,
    )
    assert body["messages"][0]["content"] == "Q solve {x} A {} {other}"


def test_question_text_keeps_every_turn_of_a_conversation() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "image_url", "image_url": {}}]},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "2+2?"},
    ]
    assert question_text(messages) == "user: Hi\nassistant: Hello\nuser: 2+2?"


def test_verifier_score_is_yes_mass_over_yes_and_no_mass() -> None:
    body = reply("Yes", [position("Yes", {"Yes": 0.6, " yes": 0.1, "No": 0.2, "Maybe": 0.1})])
    assert verifier_score(body) == pytest.approx(0.7 / 0.9)
    assert verifier_score_from_position(first_position(body)) == verifier_score(body)


def test_verifier_score_is_missing_without_logprobs_or_without_yes_and_no() -> None:
    assert verifier_score(reply("Yes")) is None
    assert verifier_score(reply("Maybe", [position("Maybe", {"Maybe": 0.9, "Perhaps": 0.1})])) is None
    assert verifier_score({"choices": []}) is None
    assert verifier_score({}) is None


def test_first_position_keeps_only_what_the_score_needs() -> None:
    body = reply("No", [position("No", {"No": 0.8, "Yes": 0.2}), position(".", {".": 1.0})])
    recorded = first_position(body)
    assert recorded is not None
    assert set(recorded) == {"token", "logprob", "top_logprobs"}
    assert [alt["token"] for alt in recorded["top_logprobs"]] == ["No", "Yes"]
    assert verifier_score_from_position(json.loads(json.dumps(recorded))) == pytest.approx(0.2)


def test_yes_no_mass_falls_back_to_the_chosen_token_and_counts_a_token_once() -> None:
    assert yes_no_mass({"token": "Yes", "logprob": math.log(0.8)}) == (pytest.approx(0.8), 0.0)
    twice = {
        "top_logprobs": [
            {"token": "yes", "logprob": math.log(0.5)},
            {"token": "yes", "logprob": math.log(0.5)},
        ]
    }
    assert yes_no_mass(twice) == (pytest.approx(0.5), 0.0)
    assert yes_no_mass({"top_logprobs": [{"token": "no", "logprob": None}]}) == (0.0, 0.0)


def test_sample_request_is_the_stage_request_at_the_temperature_without_logprobs_or_stream() -> None:
    body = {
        "model": "fast",
        "messages": QUESTION,
        "max_tokens": 8,
        "logprobs": True,
        "top_logprobs": 15,
        "stream": True,
        "n": 2,
    }
    sample = sample_request(body, 0.7)
    assert sample == {"model": "fast", "messages": QUESTION, "max_tokens": 8, "temperature": 0.7}
    assert body["stream"] is True  # the stage's own request is untouched


def test_consistency_score_is_the_share_of_equivalent_samples() -> None:
    def same(a: str, b: str) -> bool:
        return a.strip() == b.strip()

    assert consistency_score("5", ["5", " 5", "6", "5"], same) == 0.75
    assert consistency_score("5", [], same) is None


def test_self_report_request_appends_the_answer_and_the_question_to_the_conversation() -> None:
    body = {"model": "fast", "messages": QUESTION, "max_tokens": 8, "logprobs": True, "stream": True}
    follow_up = self_report_request(body, "5")
    assert follow_up["messages"] == [
        *QUESTION,
        {"role": "assistant", "content": "5"},
        {"role": "user", "content": SELF_REPORT_PROMPT},
    ]
    assert (follow_up["model"], follow_up["temperature"], follow_up["max_tokens"]) == ("fast", 0, 16)
    assert "logprobs" not in follow_up and "stream" not in follow_up


@pytest.mark.parametrize(
    ("text", "score"),
    [("85", 0.85), ("I am 90% confident.", 0.9), ("100", 1.0), ("0", 0.0), ("7.5", 0.075), (" 42/100", 0.42)],
)
def test_self_report_score_reads_the_first_number_as_a_percentage(text: str, score: float) -> None:
    assert self_report_score(text) == pytest.approx(score)


@pytest.mark.parametrize("text", ["", None, "very confident", "150", "1000"])
def test_self_report_score_is_missing_when_unparseable_or_above_100(text: str | None) -> None:
    assert self_report_score(text) is None


# --- the policy fields ----------------------------------------------------------------------------


def test_each_blackbox_scorer_needs_its_fields() -> None:
    with pytest.raises(ValidationError, match="scorer verifier needs verifier"):
        ScorerSpec(name="verifier")
    with pytest.raises(ValidationError, match="scorer consistency needs temperature, equivalence"):
        ScorerSpec(name="consistency", samples=3)
    with pytest.raises(ValidationError, match="must contain \\{question\\}"):
        ScorerSpec(name="verifier", verifier={"model": "v", "prompt": "is {answer} right?"})
    with pytest.raises(ValidationError, match="equivalence"):
        ScorerSpec(name="consistency", samples=3, temperature=0.7, equivalence="fuzzy")  # type: ignore[arg-type]
    assert ScorerSpec(name="self_report").self_report_prompt == SELF_REPORT_PROMPT


def test_a_field_of_another_scorer_is_refused() -> None:
    with pytest.raises(ValidationError, match="not a setting of scorer self_report: samples"):
        ScorerSpec(name="self_report", samples=3)
    with pytest.raises(ValidationError, match="not a setting of scorer min_probability: verifier"):
        ScorerSpec(name="min_probability", verifier={"model": "v"})


def blackbox_policy(scorer: dict[str, Any], threshold: float = 0.5) -> Policy:
    return build_policy(
        {
            "scorer": scorer,
            "models": {
                "fast": {"mean_cost_usd": 1e-6, "quality": 0.6, "scoring_cost_usd": 2e-6},
                "think": {"mean_cost_usd": 1e-5, "quality": 0.9},
            },
            "default_tier": "t",
            "tiers": {
                "t": {
                    "objective": {"max_cost_usd": 1e-4},
                    "routes": [{"models": ["fast", "think"], "thresholds": [threshold]}],
                    "expected": {"cost_usd": 5e-6, "quality": 0.8, "escalation_rate": 0.3},
                }
            },
        }
    )


def test_a_blackbox_policy_round_trips_with_its_scorer_and_scoring_cost() -> None:
    policy = blackbox_policy(
        {"name": "consistency", "samples": 4, "temperature": 0.7, "equivalence": "numeric"}
    )
    document = policy_as_document(policy)
    assert document["scorer"] == {
        "name": "consistency",
        "top_k": 15,
        "samples": 4,
        "temperature": 0.7,
        "equivalence": "numeric",
    }
    assert document["models"]["fast"]["scoring_cost_usd"] == 2e-6
    assert "scoring_cost_usd" not in document["models"]["think"]
    again = Policy.model_validate(json.loads(json.dumps(document)))
    check_content_hash(again)
    assert again.scorer.is_blackbox


def test_blackbox_thresholds_must_lie_in_0_1() -> None:
    with pytest.raises(PolicyInvalidError, match="outside the range \\[0, 1\\] of scorer verifier"):
        blackbox_policy({"name": "verifier", "verifier": {"model": "v"}}, threshold=1.5)


def test_policies_written_before_the_blackbox_fields_keep_their_content_hash(repo_root: Any) -> None:
    policy = load_policy(repo_root / "policies" / "local-demo.json")
    check_content_hash(policy)
    assert compute_policy_id(policy.model_dump(mode="json")) == policy.policy_id
    assert "scoring_cost_usd" not in json.dumps(policy.model_dump(mode="json"))
    assert ModelStats(mean_cost_usd=0, quality=0).model_dump() == {"mean_cost_usd": 0.0, "quality": 0.0}
