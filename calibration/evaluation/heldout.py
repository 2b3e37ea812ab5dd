"""Held-out curves of the pairwise envelope (deterministic and hull mixtures) and of the best single
model, one split at a time."""

from __future__ import annotations

import numpy as np

from calibration.envelope import Envelope, compute_envelope
from calibration.evaluation.budget import BUDGET_RTOL, SplitCurve
from calibration.evaluation.candidates import Candidates, heldout_curve, single_model_candidates
from calibration.evaluation.routes import route_outcomes
from calibration.runs import RunsMatrix
from calibration.splits import Split


def envelope_candidates(envelope: Envelope) -> Candidates:
    """The envelope's deterministic routes with their (calibration) cost and quality."""
    routes = [
        (tuple(models), tuple(thresholds))
        for models, thresholds in zip(envelope.models, envelope.thresholds, strict=True)
    ]
    return Candidates(routes, envelope.cost, envelope.quality)


def envelope_split_curve(matrix: RunsMatrix, split: Split, grid: np.ndarray) -> SplitCurve:
    """Envelope computed on the split's calibration rows, each budget's route scored on its test rows.

    ``grid``: (G,) budgets, USD per query. For budget g the route is the envelope point with the
    highest calibration quality among those with calibration cost <= g; the curve holds that
    route's mean quality and mean cost on the test rows (NaN below the cheapest point).
    """
    envelope = compute_envelope(matrix, rows=split.calibration)
    return heldout_curve(matrix, envelope_candidates(envelope), split.test, grid)


def single_model_split_curve(matrix: RunsMatrix, split: Split, grid: np.ndarray) -> SplitCurve:
    """No cascade: for each budget the best single model on calibration, scored on test."""
    return heldout_curve(matrix, single_model_candidates(matrix, split.calibration), split.test, grid)


def hull_split_curve(matrix: RunsMatrix, split: Split, grid: np.ndarray) -> SplitCurve:
    """Randomized mixtures on the calibration envelope's concave hull, scored on test rows.

    For budget g between hull vertices a and b (calibration costs c_a <= g <= c_b) the policy
    sends a share w = (g - c_a) / (c_b - c_a) of queries through route b and the rest through
    route a (what ``cascade calibrate --randomize`` serves); its expected test quality and cost
    are the same mixture of the two routes' test outcomes. Above the last vertex: the last
    vertex; below the first: undefined.
    """
    envelope = compute_envelope(matrix, rows=split.calibration)
    vertices = np.asarray(envelope.hull, dtype=np.int64)
    candidates = envelope_candidates(envelope)
    test_cost, test_quality = route_outcomes(matrix, [candidates.routes[i] for i in vertices], split.test)
    cal_cost = envelope.cost[vertices]
    budget = np.minimum(grid, cal_cost[-1])
    upper = np.clip(np.searchsorted(cal_cost, budget, side="left"), 0, vertices.size - 1)
    lower = np.maximum(upper - 1, 0)
    span = cal_cost[upper] - cal_cost[lower]
    with np.errstate(invalid="ignore", divide="ignore"):
        weight = np.where(span > 0, (budget - cal_cost[lower]) / span, 1.0)
    weight = np.clip(weight, 0.0, 1.0)
    quality = (1 - weight) * test_quality[lower] + weight * test_quality[upper]
    cost = (1 - weight) * test_cost[lower] + weight * test_cost[upper]
    below = grid * (1.0 + BUDGET_RTOL) < cal_cost[0]
    quality[below] = np.nan
    cost[below] = np.nan
    return SplitCurve(quality, cost)
