"""Which promise a replay holds live traffic to: held-out expectations when the policy has them,
the in-sample ones otherwise, from the section of the questions' request kind."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from policies import build_policy
from replay.report import build_report, expectation_for
from replay.run import Arm
from tests.support.gateway_testkit import POLICY_DOCUMENT
from tests.support.policy_files import heldout_expectation

HELDOUT = heldout_expectation(
    cost_usd=(0.00041, 0.00035, 0.00048), quality=(0.64, 0.58, 0.7), escalation_rate=(0.42, 0.36, 0.49)
)


def policy_with(heldout: bool = True, tool_section: bool = False) -> Any:
    document = copy.deepcopy(POLICY_DOCUMENT)
    if heldout:
        document["tiers"]["balanced"]["expected"]["heldout"] = HELDOUT
    if tool_section:
        tiers = copy.deepcopy(POLICY_DOCUMENT["tiers"])
        tiers["balanced"]["expected"] = {"cost_usd": 0.0002, "quality": 0.9, "escalation_rate": 0.1}
        document["kinds"] = {
            "tool_call": {
                "models": document["models"],
                "default_tier": document["default_tier"],
                "tiers": tiers,
                "envelope": document["envelope"],
            }
        }
    return build_policy(document)


def test_a_tier_with_heldout_expectations_is_held_to_them() -> None:
    expectation = expectation_for(policy_with(), Arm(tier="balanced"))
    assert expectation is not None
    assert expectation.basis == "heldout" and expectation.source == "tiers.balanced.expected.heldout"
    assert (expectation.quality, expectation.cost_usd, expectation.escalation_rate) == (0.64, 0.00041, 0.42)
    assert expectation.intervals is not None and expectation.intervals["quality"] == (0.58, 0.7)
    plain = expectation_for(policy_with(heldout=False), Arm(tier="balanced"))
    assert plain is not None and plain.basis == "in-sample" and plain.quality == 0.7


def test_a_budget_arm_is_held_to_its_envelope_point_in_sample() -> None:
    expectation = expectation_for(policy_with(), Arm(max_cost_usd=0.0005))
    assert expectation is not None
    assert expectation.basis == "in-sample" and expectation.source == "envelope[1]"


def test_questions_of_a_kind_with_a_section_are_held_to_the_sections_expectations() -> None:
    policy = policy_with(tool_section=True)
    tools = expectation_for(policy, Arm(tier="balanced"), {"tool_call": 30})
    assert tools is not None
    assert tools.source == "kinds.tool_call.tiers.balanced.expected" and tools.quality == 0.9
    mixed = expectation_for(policy, Arm(tier="balanced"), {"text": 30, "tool_call": 10})
    assert mixed is not None and mixed.basis == "mixed"
    assert mixed.quality == pytest.approx(0.75 * 0.64 + 0.25 * 0.9)
    assert (
        mixed.source
        == "75% x tiers.balanced.expected.heldout + 25% x kinds.tool_call.tiers.balanced.expected"
    )


def test_the_report_says_which_promise_it_used_and_gives_the_heldout_range() -> None:
    policy = policy_with()
    questions = [f"q{i}" for i in range(20)]
    rows = [
        {"arm": "tier:balanced", "query_id": q, "correct": i % 3 != 0, "cost_usd": 0.0004,
         "escalated": i % 2 == 0, "latency_ms": 10.0, "policy_id": policy.policy_id}
        for i, q in enumerate(questions)
    ]  # fmt: skip
    report = build_report(
        gateway="http://gw",
        prompts_file="p.jsonl",
        questions=questions,
        arms=[Arm(tier="balanced"), Arm(tier="direct")],
        rows=rows,
        policy=policy,
        policy_file="policy.json",
        confidence=0.95,
        request={"temperature": 0, "max_tokens": None},
        results_file="r.jsonl",
    )
    balanced, direct = report["arms"]
    assert balanced["expected_basis"] == "heldout"
    assert balanced["quality"]["expected"] == 0.64
    assert (balanced["quality"]["expected_low"], balanced["quality"]["expected_high"]) == (0.58, 0.7)
    assert direct["expected_basis"] == "in-sample" and direct["quality"]["expected_low"] is None


BOUNDS = {
    "confidence": 0.95,
    "method": "split",
    "n": 250,
    "selection_n": 250,
    "estimators": {
        "quality": "clopper-pearson",
        "cost_usd": "hoeffding-bentkus",
        "escalation_rate": "clopper-pearson",
    },
    "quality_min": 0.6,
    "cost_max": 0.0005,
    "cost_range": 0.002,
    "escalation": [0.3, 0.6],
    "target": "cost <= 0.0005",
    "target_certified": True,
}


def _bounded_report(correct_every: int, cost: float) -> dict[str, Any]:
    document = copy.deepcopy(POLICY_DOCUMENT)
    document["tiers"]["balanced"]["expected"]["heldout"] = HELDOUT
    document["tiers"]["balanced"]["expected"]["bounds"] = BOUNDS
    policy = build_policy(document)
    questions = [f"q{i}" for i in range(60)]
    rows = [
        {"arm": "tier:balanced", "query_id": q, "correct": i % correct_every != 0, "cost_usd": cost,
         "escalated": i % 2 == 0, "latency_ms": 10.0, "policy_id": policy.policy_id}
        for i, q in enumerate(questions)
    ]  # fmt: skip
    return build_report(
        gateway="http://gw",
        prompts_file="p.jsonl",
        questions=questions,
        arms=[Arm(tier="balanced")],
        rows=rows,
        policy=policy,
        policy_file="policy.json",
        confidence=0.95,
        request={"temperature": 0, "max_tokens": None},
        results_file="r.jsonl",
    )


def test_a_run_whose_interval_lies_beyond_a_bound_is_flagged_and_one_reaching_it_is_not() -> None:
    # Quality 2/3 (its interval reaches 0.6) at the promised cost: within every bound. The mean
    # check alone would have flagged nothing either; the bounds decide here.
    inside = _bounded_report(correct_every=3, cost=0.0004)
    arm = inside["arms"][0]
    assert arm["bounds"] == {"confidence": 0.95, "method": "split", "n": 250}
    assert arm["quality"]["bound_low"] == 0.6 and arm["quality"]["within_bound"] is True
    assert arm["cost_usd"]["bound_high"] == 0.0005 and arm["cost_usd"]["beyond_bound"] is False
    assert arm["escalation_rate"]["within_bound"] is True
    assert inside["ok"] and inside["flags"] == []
    # Half the answers right (interval about [0.37, 0.63]: the realized value is below 0.6, its
    # interval is not) and every request at $0.0009 (above the $0.0005 maximum, an exact interval).
    outside = _bounded_report(correct_every=2, cost=0.0009)
    arm = outside["arms"][0]
    assert arm["quality"]["within_bound"] is False and arm["quality"]["beyond_bound"] is False
    assert arm["cost_usd"]["beyond_bound"] is True and arm["outside"] == ["cost_usd"]
    assert not outside["ok"]
    assert outside["flags"] == [
        "tier:balanced: realized cost/request 0.0009 (its 95% interval [0.0009, 0.0009], n=60) lies wholly "
        "above the promised maximum 0.0005 (bound at 95%, expected.bounds)"
    ]
    # Worse quality: 1 in 6 right, interval wholly below 0.6.
    poor = _bounded_report(correct_every=1, cost=0.0004)  # never right
    assert poor["arms"][0]["quality"]["beyond_bound"] is True
    assert "below the promised minimum 0.6" in poor["flags"][0]
