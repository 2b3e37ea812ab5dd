"""Fitting the benefit scorer: the Newton logistic regression and the isotonic map agree with
scikit-learn's, cross-fitted scores never read their own query's label, and one label is refused."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

from calibration.benefit_fit import (
    _C,
    BenefitFitError,
    _isotonic_knots,
    _logistic,
    crossfit_scores,
    fit_benefit,
)
from calibration.diagnostics import auroc
from policies.benefit import FEATURES


def labelled(n: int = 300, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Features of which the first two predict the label, with noise."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, len(FEATURES)))
    helps = features[:, 0] - 0.5 * features[:, 1] + rng.normal(0, 0.7, n) > 0.6
    return features, helps


def test_the_logistic_regression_is_scikit_learns() -> None:
    features, helps = labelled()
    coefficients, intercept = _logistic(features, helps.astype(float))
    reference = LogisticRegression(C=_C, tol=1e-10, max_iter=10_000).fit(features, helps)
    np.testing.assert_allclose(coefficients, reference.coef_[0], atol=1e-6)
    assert intercept == pytest.approx(reference.intercept_[0], abs=1e-6)


def test_the_isotonic_map_is_scikit_learns_at_every_block() -> None:
    rng = np.random.default_rng(3)
    scores = np.round(rng.normal(size=400), 1)  # ties pooled first, as scikit-learn pools them
    kept = (rng.random(400) < 1 / (1 + np.exp(-2 * scores))).astype(float)
    centres, values = _isotonic_knots(scores, kept)
    assert all(b > a for a, b in itertools.pairwise(centres))
    reference = IsotonicRegression().fit(scores, kept).predict(scores)
    unsqueezed = sorted({round((v - 1e-6) / (1 - 2e-6), 9) for v in values})
    assert unsqueezed == sorted({round(float(v), 9) for v in reference})


def test_a_cross_fitted_score_does_not_read_its_own_folds_labels() -> None:
    features, helps = labelled()
    fold = np.arange(helps.shape[0]) % 5
    scores = crossfit_scores(features, helps, fold=fold)
    assert auroc(-scores, helps) > 0.8  # low = escalation helps
    flipped = helps.copy()
    flipped[fold == 2] = ~flipped[fold == 2]  # every label of fold 2 wrong
    rescored = crossfit_scores(features, flipped, fold=fold)
    np.testing.assert_array_equal(rescored[fold == 2], scores[fold == 2])
    assert not np.array_equal(rescored[fold != 2], scores[fold != 2])  # the others did read them


def test_one_label_cannot_fit_a_model() -> None:
    features, _ = labelled(50)
    with pytest.raises(BenefitFitError, match="both outcomes"):
        fit_benefit(features, np.zeros(50, dtype=bool))
    model = fit_benefit(*labelled())
    assert len(model.coefficients) == len(FEATURES) and model.coefficients[0] > 0  # raises P(helps)
