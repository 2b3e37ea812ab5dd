"""Diagnostics: AUROC, Spearman and escalation-benefit fractions against references."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score
from synthetic_runs import random_matrix

from calibration.diagnostics import (
    auroc,
    benefit_fractions,
    escalation_benefit,
    model_auroc,
    pair_diagnostics,
    spearman,
)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auroc_matches_sklearn_including_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    score = rng.integers(0, 8, 300) / 8  # many ties
    correct = rng.random(300) < 0.3 + 0.5 * score
    assert auroc(score, correct) == pytest.approx(roc_auc_score(correct, score), abs=1e-12)


def test_auroc_is_nan_with_one_class() -> None:
    assert np.isnan(auroc(np.arange(5.0), np.ones(5, dtype=bool)))


@pytest.mark.parametrize("seed", [0, 1])
def test_spearman_matches_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 20, 200).astype(float)
    y = x + rng.normal(0, 5, 200)
    assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)


def test_spearman_is_nan_for_a_constant_cost() -> None:
    assert np.isnan(spearman(np.arange(10.0), np.full(10, 3e-5)))


def test_dominance_and_decreasing_fractions_on_a_constructed_benefit() -> None:
    """Benefit +1 on the lowest 30% of scores, -1 above: 3 of 10 bins dominate; never increasing."""
    n = 1000
    score = np.arange(n) / n
    quality_l = np.where(score < 0.3, 0.0, 1.0)
    quality_h = np.where(score < 0.3, 1.0, 0.0)
    curve = escalation_benefit(score, quality_l, quality_h, [np.arange(n)], n_bins=10)
    np.testing.assert_allclose(curve.median, [1, 1, 1, -1, -1, -1, -1, -1, -1, -1])
    assert curve.dominance_fraction == pytest.approx(0.3)
    assert curve.decreasing_fraction == pytest.approx(1.0)
    np.testing.assert_allclose(curve.quantile, np.arange(0.05, 1.0, 0.1))


def test_increasing_benefit_has_zero_decreasing_fraction() -> None:
    dominance, decreasing = benefit_fractions(np.array([-0.2, -0.1, 0.0, 0.3, np.nan, 0.4]))
    assert dominance == pytest.approx(2 / 5)
    assert decreasing == 0.0


def test_benefit_band_spans_the_per_split_estimates() -> None:
    matrix = random_matrix(n=800, k=3, seed=4)
    rng = np.random.default_rng(0)
    halves = [rng.permutation(800)[:400] for _ in range(8)]
    (first, *_rest) = pair_diagnostics(matrix, halves, n_bins=8)
    curve = first.benefit
    assert np.all(curve.low <= curve.median + 1e-12) and np.all(curve.median <= curve.high + 1e-12)
    assert np.any(curve.high - curve.low > 0)
    assert np.isnan(first.spearman_score_cost)  # constant per-model cost


def test_pair_diagnostics_measure_cost_score_dependence_when_costs_vary() -> None:
    matrix = random_matrix(n=500, k=3, seed=6, varying_cost=True)
    diagnostics = pair_diagnostics(matrix)
    low, high = matrix.model_index(diagnostics[0].low), matrix.model_index(diagnostics[0].high)
    expected = spearmanr(matrix.score[:, low], matrix.cost[:, high]).statistic
    assert diagnostics[0].spearman_score_cost == pytest.approx(expected, abs=1e-12)


def test_model_auroc_covers_every_model() -> None:
    matrix = random_matrix(n=300, k=3, seed=1)
    values = model_auroc(matrix)
    assert set(values) == set(matrix.models)
    assert all(0.5 < v <= 1.0 for v in values.values())  # scores are informative by construction
