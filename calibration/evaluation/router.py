"""Baseline: a pre-generation router (no cascade: one model call per query).

Per model, a logistic regression on per-query features predicts p_m(x) = P(model m answers x
correctly), fitted on the calibration rows (labels: quality >= 0.5). For a price lambda (quality
per USD) the router sends x to ``argmax_m p_m(x) - lambda * c_m``, with c_m the model's mean
calibration cost (a router decides before any call, so it cannot see the realized cost). A sweep
over lambda traces the router's cost-quality curve; like every method, the lambda for a budget is
chosen on calibration and scored on test. It never pays a cheap model on a query it sends to an
expensive one, which is why it can beat cascades when the features are informative.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from calibration.evaluation.budget import (
    SplitCurve,
    choose_within_budget,
    compact_choices,
    curve_from_choices,
)
from calibration.routing.routed import lambda_sweep, route_choices, routed_outcomes
from calibration.runs import RunsMatrix
from calibration.splits import Split


class _Classifier(Protocol):
    """A fitted binary classifier (scikit-learn's ``LogisticRegression``)."""

    def predict_proba(self, features: np.ndarray) -> np.ndarray:
        """(n, 2) class probabilities; column 1 is P(correct)."""
        ...


class CorrectnessModels:
    """One logistic regression per model on standardized features; ``predict`` -> (n, k) p_correct."""

    def __init__(self, features: np.ndarray, quality: np.ndarray, seed: int = 0):
        from sklearn.linear_model import LogisticRegression
        from sklearn.preprocessing import StandardScaler

        self.scaler = StandardScaler().fit(features)
        scaled = self.scaler.transform(features)
        self.models: list[float | _Classifier] = []
        for column in quality.T:
            labels = column >= 0.5
            if labels.all() or not labels.any():  # one class only: a constant predictor
                self.models.append(float(labels.mean()))
                continue
            self.models.append(LogisticRegression(max_iter=1000, random_state=seed).fit(scaled, labels))

    def predict(self, features: np.ndarray) -> np.ndarray:
        scaled = self.scaler.transform(features)
        columns = [
            np.full(scaled.shape[0], model) if isinstance(model, float) else model.predict_proba(scaled)[:, 1]
            for model in self.models
        ]
        return np.column_stack(columns)


def routed_split_curve(
    matrix: RunsMatrix, split: Split, grid: np.ndarray, probabilities: Callable[[np.ndarray], np.ndarray]
) -> SplitCurve:
    """A router held out: ``probabilities(rows)`` its (len(rows), k) p_correct; the price lambda
    chosen per budget on the calibration rows, scored on the test rows."""
    cal, test = split.calibration, split.test
    model_cost = matrix.cost[cal].mean(axis=0)
    lambdas = lambda_sweep(model_cost)
    cal_choices = route_choices(probabilities(cal), model_cost, lambdas)
    cal_cost, cal_quality = routed_outcomes(cal_choices, matrix.cost[cal], matrix.quality[cal])

    chosen = choose_within_budget(cal_cost, cal_quality, grid)
    unique, remapped = compact_choices(chosen)
    if unique.size == 0:
        return SplitCurve.undefined(grid.size)
    test_choices = route_choices(probabilities(test), model_cost, lambdas[unique])
    test_cost, test_quality = routed_outcomes(test_choices, matrix.cost[test], matrix.quality[test])
    return curve_from_choices(remapped, test_cost, test_quality)


def router_split_curve(matrix: RunsMatrix, split: Split, grid: np.ndarray, *, seed: int = 0) -> SplitCurve:
    """Router fitted and its lambda chosen per budget on calibration rows, scored on test rows."""
    features = matrix.features
    if features is None:
        raise ValueError("the router needs per-query features (--feature-columns)")
    cal = split.calibration
    predictor = CorrectnessModels(features[cal], matrix.quality[cal], seed=seed)
    return routed_split_curve(matrix, split, grid, lambda rows: predictor.predict(features[rows]))
