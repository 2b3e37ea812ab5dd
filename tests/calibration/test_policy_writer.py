"""Assembling the policy file from a calibration."""

from __future__ import annotations

from pathlib import Path

import pytest
from runs_factory import four_model_example

from calibration.envelope import compute_envelope
from calibration.policy.policy_writer import build_calibrated_policy, write_policy
from calibration.tiers import TierObjective, solve_tier
from policies.decision import choose_for_budget
from policies.store import load_policy


def calibrate(randomize: bool = False):  # type: ignore[no-untyped-def]
    matrix = four_model_example()
    envelope = compute_envelope(matrix)
    tiers = {
        "cheap": solve_tier(envelope, TierObjective(max_cost_usd=1.2), randomize=randomize, name="cheap"),
        "best": solve_tier(envelope, TierObjective(min_quality=0.9), randomize=randomize, name="best"),
    }
    return build_calibrated_policy(matrix, envelope, tiers, "cheap")


def test_policy_lists_every_model_the_envelope_and_the_tiers(tmp_path: Path) -> None:
    policy = calibrate()
    assert list(policy.models) == ["A", "B", "D", "C"]  # dominated D included
    assert policy.models["D"].mean_cost_usd == 5 and policy.models["D"].quality == 0.25
    assert [(p.models, p.thresholds, p.cost_usd) for p in policy.envelope] == [
        (["A"], [], 1.0),
        (["A", "B"], [0.2], 1.5),
        (["B", "C"], [0.5], 4.5),
    ]
    assert policy.tiers["best"].routes[0].models == ["B", "C"]
    assert policy.tiers["best"].objective.min_quality == 0.9
    assert policy.tiers["cheap"].shadow_price == pytest.approx(0.5)
    assert (policy.scorer.name, policy.scorer.top_k) == ("external", 1)
    write_policy(policy, tmp_path / "policy.json")
    assert load_policy(tmp_path / "policy.json") == policy


def test_same_calibration_gives_the_same_policy_id() -> None:
    assert calibrate().policy_id == calibrate().policy_id
    assert calibrate().policy_id != calibrate(randomize=True).policy_id


def test_randomized_tier_routes_carry_weights_and_the_envelope_serves_budgets() -> None:
    policy = calibrate(randomize=True)
    routes = policy.tiers["cheap"].routes
    assert [r.weight for r in routes] == pytest.approx([0.6, 0.4])
    assert policy.tiers["cheap"].expected.cost_usd == pytest.approx(1.2)
    assert choose_for_budget(policy, 2.0).route.models == ["A", "B"]
