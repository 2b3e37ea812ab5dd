"""The push rule of ``cascade recalibrate``: not worse than the current policy, within noise."""

from __future__ import annotations

import numpy as np
import pytest

from calibration.policy.calibrate import calibrate
from calibration.recalibration.compare import compare_policies
from calibration.recalibration.rule import Estimate, TierMetrics, Tolerances, check_tier
from calibration.runs import RunsMatrix
from calibration.splits import stratified_splits
from calibration.tiers import parse_tiers
from policies.schema import Objective

BUDGET = Objective(max_cost_usd=1e-5)
TARGET = Objective(min_quality=0.8)
TOLERANCES = Tolerances(quality=0.01, cost=0.05)
ZERO = Estimate(0.0, 0.0, 0.0)


def metrics(
    quality: tuple[float, float, float], cost: tuple[float, float, float] = (1e-5, 1e-5, 1e-5)
) -> TierMetrics:
    return TierMetrics(Estimate(*quality), Estimate(*cost), ZERO)


def verdicts(objective: Objective, new: TierMetrics, current: TierMetrics, difference: TierMetrics) -> dict:
    return {c.name: c.ok for c in check_tier(objective, new, current, difference, TOLERANCES)}


@pytest.mark.parametrize(
    ("difference", "ok"),
    [
        ((-0.05, -0.08, -0.02), False),  # worse beyond noise and tolerance
        ((-0.005, -0.008, -0.002), True),  # worse beyond noise, within the tolerance
        ((-0.05, -0.11, 0.01), True),  # worse within noise
        ((0.02, -0.01, 0.05), True),
    ],
)
def test_budget_tier_quality(difference: tuple[float, float, float], ok: bool) -> None:
    new, current = metrics((0.7, 0.6, 0.8)), metrics((0.7, 0.6, 0.8))
    assert verdicts(BUDGET, new, current, metrics(difference, (0, 0, 0)))["quality"] is ok


@pytest.mark.parametrize(
    ("new_cost", "difference", "ok"),
    [
        ((1.2e-5, 1.1e-5, 1.3e-5), (2e-6, 1e-6, 3e-6), False),  # over budget beyond 5% and costlier
        ((1.2e-5, 1.1e-5, 1.3e-5), (0.0, -1e-6, 1e-6), True),  # over, but the current overruns as much
        ((1.03e-5, 1.02e-5, 1.04e-5), (2e-6, 1e-6, 3e-6), True),  # over by less than the tolerance
        ((1.2e-5, 0.9e-5, 1.5e-5), (2e-6, 1e-6, 3e-6), True),  # over within noise
    ],
)
def test_budget_tier_cost(
    new_cost: tuple[float, float, float], difference: tuple[float, float, float], ok: bool
) -> None:
    quality = (0.7, 0.6, 0.8)
    result = verdicts(
        BUDGET, metrics(quality, new_cost), metrics(quality), metrics((0.0, -0.01, 0.01), difference)
    )
    assert result == {"quality": True, "cost": ok}


def test_quality_tier_may_lose_quality_it_does_not_need_but_not_miss_its_target() -> None:
    worse = metrics((-0.06, -0.09, -0.03), (-5e-6, -6e-6, -4e-6))
    current = metrics((0.9, 0.88, 0.92), (2e-5, 2e-5, 2e-5))
    reaches = metrics((0.84, 0.8, 0.88), (1.5e-5, 1.5e-5, 1.5e-5))
    misses = metrics((0.74, 0.7, 0.78), (1.5e-5, 1.5e-5, 1.5e-5))
    assert verdicts(TARGET, reaches, current, worse) == {"quality": True, "cost": True}
    assert verdicts(TARGET, misses, current, worse)["quality"] is False


def test_quality_tier_may_cost_more_only_to_reach_a_target_the_current_misses() -> None:
    costlier = metrics((0.05, 0.02, 0.08), (5e-6, 4e-6, 6e-6))
    new = metrics((0.86, 0.83, 0.89), (2.5e-5, 2.5e-5, 2.5e-5))
    reaching = metrics((0.81, 0.78, 0.84), (2e-5, 2e-5, 2e-5))
    missing = metrics((0.72, 0.69, 0.75), (2e-5, 2e-5, 2e-5))
    assert verdicts(TARGET, new, reaching, costlier)["cost"] is False
    assert verdicts(TARGET, new, missing, costlier)["cost"] is True


def test_a_tier_the_current_policy_lacks_is_compared_with_none() -> None:
    checks = check_tier(BUDGET, metrics((0.1, 0.0, 0.2), (1e-3, 1e-3, 1e-3)), None, None, TOLERANCES)
    assert [(c.name, c.ok) for c in checks] == [("compared", True)]


def _runs(n: int, seed: int) -> RunsMatrix:
    """Three models whose scores carry no information: a small calibration set overfits its thresholds."""
    rng = np.random.default_rng(seed)
    quality = np.column_stack([rng.random(n) < 0.45, rng.random(n) < 0.6, rng.random(n) < 0.92]).astype(float)
    return RunsMatrix(
        models=("cheap", "mid", "big"),
        query_ids=np.array([f"q{i}" for i in range(n)]),
        quality=quality,
        cost=np.tile([1e-6, 3e-6, 2e-5], (n, 1)),
        score=rng.random((n, 3)).round(4),
        scorer="mean_token_negentropy",
        top_k=15,
    )


def test_a_policy_fitted_on_little_data_is_usually_refused_an_equally_good_one_rarely() -> None:
    spec = parse_tiers(
        {"default_tier": "q", "tiers": {"q": {"min_quality": 0.75}, "b": {"max_cost_usd": 8e-6}}}
    )
    overfit_refused = equal_refused = 0
    for seed in range(20):
        current = calibrate(_runs(20000, 1000 + seed), spec).policy  # much more data
        equal = calibrate(_runs(20000, 5000 + seed), spec).policy
        traffic = _runs(2000, seed)
        split = stratified_splits(2000, n_splits=1, test_fraction=0.5, seed=0)[0]
        comparison = compare_policies(equal, traffic, current, traffic, split.test, resamples=1000)
        equal_refused += comparison.refusal() is not None
        small = _runs(300, seed)
        split = stratified_splits(300, n_splits=1, test_fraction=0.8, seed=0)[0]  # 60 to calibrate on
        overfit = calibrate(small, spec, rows=split.calibration).policy
        comparison = compare_policies(overfit, small, current, small, split.test, resamples=1000)
        overfit_refused += comparison.refusal() is not None
    assert equal_refused <= 2
    assert overfit_refused >= 8


def test_dropping_a_served_tier_is_refused() -> None:
    runs = _runs(400, 0)
    both = parse_tiers(
        {"default_tier": "b", "tiers": {"b": {"max_cost_usd": 8e-6}, "e": {"max_cost_usd": 2e-6}}}
    )
    one = parse_tiers({"default_tier": "b", "tiers": {"b": {"max_cost_usd": 8e-6}}})
    comparison = compare_policies(
        calibrate(runs, one).policy, runs, calibrate(runs, both).policy, runs, np.arange(400), resamples=200
    )
    assert comparison.dropped_tiers == ["e"]
    assert comparison.refusal() is not None and "lacks tier(s) e" in comparison.refusal()
