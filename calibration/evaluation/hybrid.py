"""The router with principal components, and route-then-cascade, on the held-out protocol.

Route-then-cascade over a pool pair (L, H): a router fitted on the calibration rows predicts
p_L(x) = P(L answers x correctly). A query with p_L(x) < tau goes straight to H (L's call is not
paid); every other query runs the cascade L -> H, escalating iff s_L < t. The threshold t is
calibrated on the queries routed to the cascade: for each tau (quantiles of p_L on calibration,
tau = 0 sending none direct, i.e. the plain cascade) every distinct threshold of the routed rows is
a candidate, with its exact calibration cost and quality (``calibration.frontier.pair_frontier`` on
those rows plus the direct rows' H outcomes). Single models are candidates too. Per budget the best
calibration candidate is chosen and scored on the test rows with the same tau and t.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np

from calibration.evaluation.budget import (
    SplitCurve,
    choose_within_budget,
    compact_choices,
    curve_from_choices,
)
from calibration.evaluation.candidates import non_dominated_models
from calibration.evaluation.router import lambda_sweep, route_choices, routed_outcomes
from calibration.frontier import pair_frontier
from calibration.routing.fit import fit_linear_router
from calibration.runs import RunsMatrix
from calibration.splits import Split
from policies.router import LinearRouter

DIRECT_LEVELS = np.linspace(0.0, 0.9, 19)  # quantiles of p_L on calibration tried as tau


@dataclass(frozen=True)
class HybridCandidates:
    """Candidates: ``low``/``high`` model columns (equal for a single model), ``tau`` (send direct to
    H iff p_L < tau), ``threshold`` (escalate iff s_L < threshold), calibration ``cost``/``quality``
    and ``direct``/``escalated`` shares of the calibration queries."""

    low: np.ndarray
    high: np.ndarray
    tau: np.ndarray
    threshold: np.ndarray
    cost: np.ndarray
    quality: np.ndarray
    direct: np.ndarray
    escalated: np.ndarray


def _fit(matrix: RunsMatrix, rows: np.ndarray, components: int | None, seed: int) -> LinearRouter:
    if matrix.features is None:
        raise ValueError("the router needs per-query features")
    return fit_linear_router(
        matrix.features[rows],
        matrix.quality[rows],
        matrix.models,
        "features",
        components=components,
        seed=seed,
    )


def hybrid_candidates(matrix: RunsMatrix, rows: np.ndarray, p_correct: np.ndarray) -> HybridCandidates:
    """Every (pair, tau, threshold) and single model, measured on ``rows``; ``p_correct`` (len(rows), k)."""
    parts: dict[str, list[np.ndarray]] = {key: [] for key in HybridCandidates.__dataclass_fields__}

    n = rows.size
    for j in range(len(matrix.models)):
        _add_candidates(
            parts,
            j,
            j,
            0.0,
            np.zeros(1),
            matrix.cost[rows, j].mean(keepdims=True),
            matrix.quality[rows, j].mean(keepdims=True),
            0.0,
            np.zeros(1),
        )
    pool = [matrix.model_index(name) for name in non_dominated_models(matrix, rows)]
    for low, high in combinations(pool, 2):
        p_low = p_correct[:, low]
        taus = np.unique(np.concatenate(([0.0], np.quantile(p_low, DIRECT_LEVELS[1:]))))
        cost_h, quality_h = matrix.cost[rows, high], matrix.quality[rows, high]
        for tau in taus:
            direct = p_low < tau
            routed = ~direct
            if not routed.any():
                continue
            curve = pair_frontier(
                matrix.score[rows[routed], low],
                matrix.stage_cost(rows[routed], [low])[:, 0],
                matrix.quality[rows[routed], low],
                cost_h[routed],
                quality_h[routed],
                saving_l=None
                if matrix.escalation_saving is None
                else matrix.escalation_saving[rows[routed], low],
            )
            share = routed.sum() / n
            _add_candidates(
                parts,
                low,
                high,
                float(tau),
                curve.thresholds,
                (cost_h[direct].sum() / n) + share * curve.cost,
                (quality_h[direct].sum() / n) + share * curve.quality,
                float(direct.mean()),
                share * curve.escalation_rate,
            )
    return HybridCandidates(**{key: np.concatenate(values) for key, values in parts.items()})


def _add_candidates(
    parts: dict[str, list[np.ndarray]],
    low: int,
    high: int,
    tau: float,
    thresholds: np.ndarray,
    cost: np.ndarray,
    quality: np.ndarray,
    direct: float,
    escalated: np.ndarray,
) -> None:
    """Append ``thresholds.size`` candidates of one (low, high, tau) to ``parts``."""
    m = thresholds.size
    for key, value in (
        ("low", np.full(m, low)),
        ("high", np.full(m, high)),
        ("tau", np.full(m, tau)),
        ("threshold", thresholds),
        ("cost", cost),
        ("quality", quality),
        ("direct", np.full(m, direct)),
        ("escalated", escalated),
    ):
        parts[key].append(np.asarray(value))


def hybrid_outcomes(
    matrix: RunsMatrix,
    rows: np.ndarray,
    p_correct: np.ndarray,
    candidates: HybridCandidates,
    which: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Mean cost and quality on ``rows`` of the candidates ``which`` (indices into ``candidates``)."""
    cost = np.empty(which.size)
    quality = np.empty(which.size)
    for out, index in enumerate(which):
        low, high = int(candidates.low[index]), int(candidates.high[index])
        if low == high:
            cost[out], quality[out] = matrix.cost[rows, low].mean(), matrix.quality[rows, low].mean()
            continue
        direct = p_correct[:, low] < candidates.tau[index]
        escalate = ~direct & (matrix.score[rows, low] < candidates.threshold[index])
        cheap_cost = matrix.stage_cost(rows, [low])[:, 0]
        per_cost = np.where(direct, 0.0, cheap_cost) + np.where(
            direct | escalate, matrix.cost[rows, high], 0.0
        )
        if matrix.escalation_saving is not None:  # a prefix rule's cancelled cheap call
            per_cost -= np.where(escalate, matrix.escalation_saving[rows, low], 0.0)
        per_quality = np.where(direct | escalate, matrix.quality[rows, high], matrix.quality[rows, low])
        cost[out], quality[out] = per_cost.mean(), per_quality.mean()
    return cost, quality


def hybrid_split_curve(
    matrix: RunsMatrix, split: Split, grid: np.ndarray, *, components: int | None, seed: int = 0
) -> SplitCurve:
    """Route-then-cascade chosen per budget on calibration rows, scored on test rows."""
    router = _fit(matrix, split.calibration, components, seed)
    assert matrix.features is not None
    cal_p = router.probabilities(matrix.features[split.calibration])
    candidates = hybrid_candidates(matrix, split.calibration, cal_p)
    chosen = choose_within_budget(candidates.cost, candidates.quality, grid)
    unique, remapped = compact_choices(chosen)
    if unique.size == 0:
        return SplitCurve.undefined(grid.size)
    test_p = router.probabilities(matrix.features[split.test])
    test_cost, test_quality = hybrid_outcomes(matrix, split.test, test_p, candidates, unique)
    return curve_from_choices(remapped, test_cost, test_quality)


def linear_router_split_curve(
    matrix: RunsMatrix, split: Split, grid: np.ndarray, *, components: int | None, seed: int = 0
) -> SplitCurve:
    """The routed mechanism as served (``policies.router``): lambda chosen per budget on calibration."""
    router = _fit(matrix, split.calibration, components, seed)
    assert matrix.features is not None
    cal, test = split.calibration, split.test
    model_cost = matrix.cost[cal].mean(axis=0)
    lambdas = lambda_sweep(model_cost)
    choices = route_choices(router.probabilities(matrix.features[cal]), model_cost, lambdas)
    cal_cost, cal_quality = routed_outcomes(choices, matrix.cost[cal], matrix.quality[cal])
    chosen = choose_within_budget(cal_cost, cal_quality, grid)
    unique, remapped = compact_choices(chosen)
    if unique.size == 0:
        return SplitCurve.undefined(grid.size)
    test_choices = route_choices(router.probabilities(matrix.features[test]), model_cost, lambdas[unique])
    test_cost, test_quality = routed_outcomes(test_choices, matrix.cost[test], matrix.quality[test])
    return curve_from_choices(remapped, test_cost, test_quality)
