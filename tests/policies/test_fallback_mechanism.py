"""A tier's ``mechanism``: ``fallback`` is written by hand, checked on load, and leaves the
content hash of every policy without it as it was."""

from __future__ import annotations

from typing import Any

import pytest

from policies import PolicyInvalidError, build_policy, parse_policy
from policies.capabilities import ModelCapabilities, capability_problems
from tests.support.policy_files import policy_document

FALLBACK = {
    "mechanism": "fallback",
    "objective": {"min_quality": 0.5},
    "routes": [{"models": ["small", "large"]}],
    "expected": {"cost_usd": 0.0001, "quality": 0.5, "escalation_rate": 0.05},
}


def _with_tier(tier: dict[str, Any]) -> dict[str, Any]:
    document = policy_document()
    document["tiers"]["reliable"] = tier
    return document


def test_a_hand_written_fallback_tier_loads_and_round_trips() -> None:
    policy = build_policy(_with_tier(FALLBACK))

    assert policy.tiers["reliable"].mechanism == "fallback"
    assert policy.tiers["reliable"].routes[0].thresholds == []
    assert parse_policy(policy.model_dump_json()) == policy
    # Nothing is scored: a model without logprobs is fine in a fallback tier.
    no_logprobs = ModelCapabilities(logprobs=False)
    problems = capability_problems(policy, {"small": no_logprobs, "large": no_logprobs})
    assert not [p for p in problems if "reliable" in p]


def test_a_policy_without_a_mechanism_keeps_its_id() -> None:
    document = policy_document()
    plain = build_policy(document)
    document["tiers"]["balanced"]["mechanism"] = "cascade"

    assert "mechanism" not in plain.model_dump(mode="json")["tiers"]["balanced"]
    assert build_policy(document).policy_id != plain.policy_id  # written, it is part of the content


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"routes": [{"models": ["small", "large"], "thresholds": [0.5]}]}, "needs 0 threshold"),
        ({"mechanism": None}, "needs 1 threshold"),  # a cascade route without its thresholds
        ({"commit": {"rule": "prefix", "tokens": 8}}, "takes no prefix commit rule"),
        ({"mechanism": "router"}, "mechanism"),
    ],
)
def test_a_fallback_tier_that_does_not_fit_its_mechanism_is_refused(
    change: dict[str, Any], message: str
) -> None:
    tier = {**FALLBACK, **change}
    with pytest.raises((PolicyInvalidError, ValueError), match=message):
        build_policy(_with_tier({k: v for k, v in tier.items() if v is not None}))
