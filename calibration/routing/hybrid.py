"""Route-then-cascade over a pool pair (L, H), as a policy's ``hybrid`` tier serves it.

A router (``calibration.routing.fit``) predicts p_L(x) = P(L answers x correctly). A query with
p_L(x) < tau goes straight to H (L's call is not paid); every other query runs the cascade L -> H,
escalating iff s_L < t. On the rows given, for each tau (quantiles of p_L, tau = 0 sending none
direct, i.e. the plain cascade) every distinct threshold of the routed rows is a candidate, with
its exact cost and quality (``calibration.frontier.pair_frontier`` on those rows plus the direct
rows' H outcomes). Single models are candidates too. ``calibration.routing.mechanisms`` chooses
among them per tier; ``calibration.evaluation.hybrid`` measures the choice held out.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np

from calibration.envelope import non_dominated_models
from calibration.frontier import pair_frontier
from calibration.runs import RunsMatrix
from policies.router import goes_direct

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
            direct = goes_direct(p_low, tau)
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
        direct = goes_direct(p_correct[:, low], candidates.tau[index])
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
