"""One-sided mean bounds (stats.bounds) against scipy's Beta quantiles, and their coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import beta, binom

from stats.bounds import (
    binomial_cdf,
    bonferroni,
    clopper_pearson_lower,
    clopper_pearson_upper,
    hoeffding_bentkus_lower,
    hoeffding_bentkus_p_value,
    hoeffding_bentkus_upper,
    mean_upper_bound,
    queries_needed,
    regularized_beta,
)

CASES = [
    (1, 10, 0.05),
    (3, 10, 0.05),
    (9, 10, 0.0125),
    (231, 250, 0.0125),
    (5, 1000, 0.01),
    (4990, 5000, 0.001),
]


@pytest.mark.parametrize(("k", "n", "delta"), CASES)
def test_clopper_pearson_is_scipys_beta_quantile(k: int, n: int, delta: float) -> None:
    assert clopper_pearson_lower(k, n, delta) == pytest.approx(beta.ppf(delta, k, n - k + 1), rel=1e-9)
    assert clopper_pearson_upper(k, n, delta) == pytest.approx(beta.ppf(1 - delta, k + 1, n - k), rel=1e-9)


def test_clopper_pearson_at_the_ends_has_its_closed_form() -> None:
    # No success: the upper bound solves (1 - p)^n = delta; all successes mirror it.
    assert clopper_pearson_upper(0, 20, 0.05) == pytest.approx(1 - 0.05 ** (1 / 20), rel=1e-12)
    assert clopper_pearson_lower(20, 20, 0.05) == pytest.approx(0.05 ** (1 / 20), rel=1e-12)
    assert clopper_pearson_lower(0, 20, 0.05) == 0.0
    assert clopper_pearson_upper(20, 20, 0.05) == 1.0


BETA_POINTS = [(0.3, 2.0, 5.0), (0.9, 40.5, 3.0), (0.01, 0.5, 0.5), (0.7, 300.0, 120.0)]


@pytest.mark.parametrize(("x", "a", "b"), BETA_POINTS)
def test_regularized_beta_and_binomial_cdf_match_scipy(x: float, a: float, b: float) -> None:
    assert regularized_beta(x, a, b) == pytest.approx(beta.cdf(x, a, b), rel=1e-10, abs=1e-14)
    assert binomial_cdf(7, 30, x) == pytest.approx(binom.cdf(7, 30, x), rel=1e-10, abs=1e-14)


@pytest.mark.parametrize(("k", "n", "delta"), CASES)
def test_hoeffding_bentkus_is_never_tighter_than_the_exact_bound(k: int, n: int, delta: float) -> None:
    assert hoeffding_bentkus_lower(k / n, n, delta) <= clopper_pearson_lower(k, n, delta) + 1e-12
    assert hoeffding_bentkus_upper(k / n, n, delta) >= clopper_pearson_upper(k, n, delta) - 1e-12


def test_hoeffding_bentkus_upper_bound_is_where_its_p_value_reaches_delta() -> None:
    # At the bound m the Hoeffding term exp(-n kl(mean, m)) or the Bentkus term e P(Bin <= ceil(n mean))
    # equals delta: here, for n = 100 and mean 0.3, the smaller of the two.
    mean, n, delta = 0.3, 100, 0.05
    m = hoeffding_bentkus_upper(mean, n, delta)
    kl = mean * math.log(mean / m) + (1 - mean) * math.log((1 - mean) / (1 - m))
    p = min(math.exp(-n * kl), math.e * binom.cdf(30, n, m))
    assert p == pytest.approx(delta, rel=1e-6)
    assert 0.3 < m < 0.5


def test_both_bounds_cover_the_true_mean_at_least_as_often_as_promised() -> None:
    # 4,000 samples of 40 values: Bernoulli(0.7) for the exact bound, Beta(2, 3) (mean 0.4) for
    # Hoeffding-Bentkus. Each bound misses at most delta of the time (plus 3 binomial sd of noise).
    # The exact bound depends only on the count of successes (one bound per count); the
    # Hoeffding-Bentkus bound misses 0.4 exactly when its p-value at 0.4 is at most delta.
    rng = np.random.default_rng(7)
    delta, trials = 0.1, 4000
    successes = (rng.random((trials, 40)) < 0.7).sum(axis=1)
    lower = {k: clopper_pearson_lower(k, 40, delta) for k in range(41)}
    misses_exact = sum(lower[int(k)] > 0.7 for k in successes)
    means = rng.beta(2.0, 3.0, (trials, 40)).mean(axis=1)
    misses_hb = sum(hoeffding_bentkus_p_value(float(m), 40, 0.4) <= delta for m in means)
    slack = 3 * math.sqrt(delta * (1 - delta) * trials)
    assert 0 < misses_exact <= delta * trials + slack
    assert misses_hb <= delta * trials + slack
    assert mean_upper_bound(rng.beta(2.0, 3.0, 40), delta).method == "hoeffding-bentkus"


def test_a_bound_on_a_range_scales_the_values_and_keeps_the_mean() -> None:
    costs = np.array([0.0, 1e-5, 2e-5, 4e-5])
    bound = mean_upper_bound(costs, 0.05, upper=4e-5)
    assert bound.mean == pytest.approx(costs.mean())
    assert costs.mean() < bound.value <= 4e-5
    assert bound.method == "hoeffding-bentkus"
    with pytest.raises(ValueError, match="must lie in"):
        mean_upper_bound(costs, 0.05, upper=1e-5)


def test_bonferroni_splits_the_error_between_the_statements() -> None:
    assert bonferroni(0.95, 4) == pytest.approx(0.0125)
    with pytest.raises(ValueError):
        bonferroni(1.0, 4)


def test_queries_needed_is_the_first_sample_size_whose_bound_clears_the_target() -> None:
    n = queries_needed(0.92, 0.9, 0.0125, side="lower", method="clopper-pearson")
    assert n is not None
    assert clopper_pearson_lower(0.92 * n, n, 0.0125) >= 0.9
    assert clopper_pearson_lower(0.92 * (n - 1), n - 1, 0.0125) < 0.9
    assert queries_needed(0.9, 0.9, 0.0125, side="lower", method="clopper-pearson") is None
    up = queries_needed(0.3, 0.35, 0.0125, side="upper", method="hoeffding-bentkus")
    assert up is not None and hoeffding_bentkus_upper(0.3, up, 0.0125) <= 0.35
