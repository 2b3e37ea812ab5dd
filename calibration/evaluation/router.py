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

from typing import Protocol

import numpy as np

from calibration.evaluation.budget import (
    SplitCurve,
    choose_within_budget,
    compact_choices,
    curve_from_choices,
)
from calibration.runs import RunsMatrix
from calibration.splits import Split

N_LAMBDAS = 300
_LAMBDAS_PER_CHUNK = 32  # bounds the (lambdas x queries x models) work array


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


def lambda_sweep(model_cost: np.ndarray, n: int = N_LAMBDAS) -> np.ndarray:
    """0 and ``n - 1`` geometric prices (quality per USD) from "cost barely matters" to "only cost".

    At the low end lambda * (cost spread) is 1e-3 of a probability; at the high end the cheapest
    model wins even against a model 100 probability points better.
    """
    spread = float(np.ptp(model_cost))
    cheapest_gap = np.diff(np.unique(model_cost))
    smallest_gap = float(cheapest_gap.min()) if cheapest_gap.size else max(spread, 1e-12)
    if spread <= 0:
        return np.zeros(1)
    return np.concatenate(([0.0], np.geomspace(1e-3 / spread, 100.0 / smallest_gap, n - 1)))


def route_choices(p_correct: np.ndarray, model_cost: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    """``(L, n)`` model index per lambda and query: argmax of p - lambda * cost (ties: cheaper model)."""
    choices = np.empty((lambdas.size, p_correct.shape[0]), dtype=np.int64)
    for start in range(0, lambdas.size, _LAMBDAS_PER_CHUNK):
        block = lambdas[start : start + _LAMBDAS_PER_CHUNK]
        utility = p_correct[None, :, :] - block[:, None, None] * model_cost[None, None, :]
        choices[start : start + block.size] = utility.argmax(axis=2)
    return choices


def routed_outcomes(
    choices: np.ndarray, cost: np.ndarray, quality: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(L,)`` mean realized cost and quality of routing ``choices`` (L, n) on (n, k) outcomes."""
    rows = np.arange(choices.shape[1])[None, :]
    return cost[rows, choices].mean(axis=1), quality[rows, choices].mean(axis=1)


def router_split_curve(matrix: RunsMatrix, split: Split, grid: np.ndarray, *, seed: int = 0) -> SplitCurve:
    """Router fitted and its lambda chosen per budget on calibration rows, scored on test rows."""
    if matrix.features is None:
        raise ValueError("the router needs per-query features (--feature-columns)")
    cal, test = split.calibration, split.test
    predictor = CorrectnessModels(matrix.features[cal], matrix.quality[cal], seed=seed)
    model_cost = matrix.cost[cal].mean(axis=0)
    lambdas = lambda_sweep(model_cost)
    cal_choices = route_choices(predictor.predict(matrix.features[cal]), model_cost, lambdas)
    cal_cost, cal_quality = routed_outcomes(cal_choices, matrix.cost[cal], matrix.quality[cal])

    chosen = choose_within_budget(cal_cost, cal_quality, grid)
    unique, remapped = compact_choices(chosen)
    if unique.size == 0:
        return SplitCurve.undefined(grid.size)
    test_choices = route_choices(predictor.predict(matrix.features[test]), model_cost, lambdas[unique])
    test_cost, test_quality = routed_outcomes(test_choices, matrix.cost[test], matrix.quality[test])
    return curve_from_choices(remapped, test_cost, test_quality)
