"""Each tier's one-sided bounds (calibration.bounds): chosen on one part, certified on the other,
written into the policy, and a target they cannot prove said so with how many more queries."""

from __future__ import annotations

import pytest

from calibration.bounds import BoundSettings, route_outcomes, tier_bounds, uncertified_note
from calibration.envelope import compute_envelope
from calibration.policy.calibrate import calibrate
from calibration.splits import stratified_splits
from calibration.tiers import parse_tiers, solve_tiers
from stats.bounds import bonferroni, clopper_pearson_lower, clopper_pearson_upper, queries_needed
from tests.calibration.synthetic_runs import random_matrix

TIERS = {
    "default_tier": "mid",
    "tiers": {"mid": {"max_cost_usd": 5e-5}, "sure": {"min_quality": 0.5}, "hard": {"min_quality": 0.74}},
}


def test_a_policy_carries_bounds_certified_on_the_part_its_routes_were_not_chosen_on() -> None:
    matrix = random_matrix(n=400, k=3, seed=4, strata=True)
    spec = parse_tiers(TIERS)
    calibrated = calibrate(matrix, spec, bounds=BoundSettings(confidence=0.9, seed=3))
    policy = calibrated.policy
    (split,) = stratified_splits(400, n_splits=1, seed=3, strata=matrix.strata)
    chosen = solve_tiers(compute_envelope(matrix, rows=split.calibration), spec)
    delta = bonferroni(0.9, 4)
    for name, solution in chosen.items():
        bounds = policy.tiers[name].expected.bounds
        assert bounds is not None and bounds.confidence == 0.9 and bounds.n == split.test.size == 200
        outcomes = route_outcomes(matrix, solution, split.test)
        right, escalated = outcomes.quality.sum(), outcomes.escalated.sum()
        assert bounds.estimators["quality"] == "clopper-pearson"
        assert bounds.quality_min == pytest.approx(clopper_pearson_lower(right, 200, delta))
        assert bounds.escalation[0] == pytest.approx(clopper_pearson_lower(escalated, 200, delta))
        assert bounds.escalation[1] == pytest.approx(clopper_pearson_upper(escalated, 200, delta))
        assert outcomes.cost.mean() < bounds.cost_max <= bounds.cost_range
    # The file round-trips them; an old policy without them still loads (schema version 1).
    assert calibrate(matrix, spec).policy.tiers["mid"].expected.bounds is None


def test_an_uncertifiable_target_says_so_with_how_many_more_queries_would_do() -> None:
    matrix = random_matrix(n=400, k=3, seed=4, strata=True)
    tiers = {"roomy": {"max_cost_usd": 1e-4}, "close": {"min_quality": 0.5}, "hard": {"min_quality": 0.74}}
    bounds = tier_bounds(matrix, parse_tiers({"default_tier": "roomy", "tiers": tiers}), BoundSettings())
    roomy, close, hard = bounds["roomy"], bounds["close"], bounds["hard"]
    assert roomy["target"] == "cost <= 0.0001" and roomy["target_certified"] is True
    assert uncertified_note("roomy", roomy) is None and "more_queries" not in roomy
    # 'hard' is met on the certification part, but not by its 95% lower bound at n=200.
    assert hard["target_certified"] is False and hard["quality_min"] < 0.74
    note = uncertified_note("hard", hard)
    assert note == (
        f"tier 'hard': quality >= 0.74 is not certifiable at 95% with n=200; about "
        f"{hard['more_queries']:,} more labelled queries would make it feasible"
    )
    # The more queries: at the observed certification mean, the bound clears the target at
    # (400 + more) / 2 certification queries and not at one fewer.
    (split,) = stratified_splits(400, n_splits=1, seed=0, strata=matrix.strata)
    solution = solve_tiers(
        compute_envelope(matrix, rows=split.calibration),
        parse_tiers({"default_tier": "hard", "tiers": {"hard": tiers["hard"]}}),
    )["hard"]
    mean = route_outcomes(matrix, solution, split.test).quality.mean()
    needed = queries_needed(mean, 0.74, bonferroni(0.95, 4), side="lower", method="clopper-pearson")
    assert needed is not None and hard["more_queries"] == 2 * needed - 400
    # 'close' was chosen to just reach 0.5 on the selection part and falls short on the other.
    assert close["target_certified"] is False and "more_queries" not in close
    assert "more labelled queries would not help" in (uncertified_note("close", close) or "")
