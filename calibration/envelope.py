"""The pairwise envelope: best achievable quality at every cost over a model pool.

Steps, all on the given calibration rows:

1. Pool: drop every model that another model beats strictly on both counts (cheaper and better).
2. Pairs: every cost-ordered (L, H) from the pool with a_H > a_L (L before H in the runs' cost order).
3. Candidates: every single model, and every pair at every threshold (``frontier.pair_frontier``);
   L's cost in a pair includes the cost of scoring it (a black-box scorer's extra calls).
4. Envelope: the upper-left Pareto set of the candidates over (cost, quality); each point keeps
   its route. Switching points are where the route's model set changes; the concave hull (the
   randomized mixtures between its vertices) is computed over the envelope points.

Everything is vectorized over thresholds (one sort per pair, one sort overall); the only Python
loop is over the O(k^2) pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from calibration.frontier import FrontierCurve, pair_frontier
from calibration.runs import RunsMatrix

# Quality differences below this are float noise from prefix sums, not real improvements.
_QUALITY_EPS = 1e-12
# Hull geometry runs on coordinates normalized to [0, 1]; smaller cross products are float noise.
_HULL_EPS = 1e-12
# Peeling passes before the exact one-scan fallback (real envelopes need a handful).
_MAX_PEELING_PASSES = 64


@dataclass(frozen=True)
class Envelope:
    """The envelope: m Pareto-optimal deterministic routes, sorted by cost with quality increasing.

    Attributes:
        cost: (m,) mean cost per query, USD (strictly increasing).
        quality: (m,) mean quality (strictly increasing).
        escalation_rate: (m,) share of queries escalated (0 for single models).
        models: route of each point: (model,) or (cheap, expensive).
        thresholds: () for a single model, (tau,) for a pair (escalate iff score < tau).
        switching_points: indices i >= 1 where the model set differs from point i - 1.
        hull: ascending indices of the concave-hull vertices (first and last point included).
        model_names: all k models of the runs (cost order).
        model_cost, model_quality: (k,) mean cost (USD) and quality of each model.
        pool: the non-dominated models, cost order.
        pairs: (L, H) -> that pair's full frontier curve (for plots and diagnostics).
    """

    cost: np.ndarray
    quality: np.ndarray
    escalation_rate: np.ndarray
    models: list[tuple[str, ...]]
    thresholds: list[tuple[float, ...]]
    switching_points: list[int]
    hull: np.ndarray
    model_names: tuple[str, ...] = ()
    model_cost: np.ndarray = field(default_factory=lambda: np.empty(0))
    model_quality: np.ndarray = field(default_factory=lambda: np.empty(0))
    pool: tuple[str, ...] = ()
    pairs: dict[tuple[str, str], FrontierCurve] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.cost.shape[0])

    def route_label(self, index: int) -> str:
        """Human-readable route of point ``index``: 'A' or 'A -> B @ 0.42'."""
        models = self.models[index]
        if len(models) == 1:
            return models[0]
        return f"{' -> '.join(models)} @ {', '.join(f'{t:.6g}' for t in self.thresholds[index])}"


def dominated_models(cost: np.ndarray, quality: np.ndarray) -> np.ndarray:
    """(k,) bool: True where some other model is strictly cheaper AND strictly better."""
    cost = np.asarray(cost, dtype=np.float64)
    quality = np.asarray(quality, dtype=np.float64)
    beats = (cost[:, None] < cost[None, :]) & (quality[:, None] > quality[None, :])  # [j, m]: j beats m
    return np.asarray(beats.any(axis=0))


def candidate_pairs(quality: np.ndarray, pool: np.ndarray) -> list[tuple[int, int]]:
    """Index pairs (L, H) from the pool, L before H in cost order, with quality[H] > quality[L]."""
    members = np.flatnonzero(pool)
    return [
        (int(low), int(high))
        for position, low in enumerate(members)
        for high in members[position + 1 :]
        if quality[high] > quality[low]
    ]


def compute_envelope(matrix: RunsMatrix, rows: np.ndarray | None = None) -> Envelope:
    """Envelope of single models and all pool pairs, on ``rows`` of the matrix (default: all).

    Args:
        matrix: the runs, models in cost order.
        rows: int index array of the calibration queries.

    Returns:
        The Envelope (see its attributes), exact: every distinct score of L is a threshold.
    """
    data = matrix if rows is None else matrix.subset(rows)
    n = data.quality.shape[0]
    if n == 0:
        raise ValueError("the envelope needs at least one query")
    # Means as sum / n, the same arithmetic as the pair frontiers, so equal points compare equal.
    model_cost = data.cost.sum(axis=0) / n
    model_quality = data.quality.sum(axis=0) / n
    pool = ~dominated_models(model_cost, model_quality)
    # A model the scorer cannot score (no recorded black-box calls) never escalates: not an L.
    scorable = np.array([name not in data.unscored for name in data.models])
    pairs = [(low, high) for low, high in candidate_pairs(model_quality, pool) if scorable[low]]

    routes, (cost, quality, escalation, route, threshold), curves = _candidates(
        data, pairs, model_cost, model_quality
    )
    # Cheapest first; at equal cost the best first; then the least escalation (singles win ties).
    order = np.lexsort((route, escalation, -quality, cost))
    order = order[_pareto_mask_sorted(quality[order])]

    env_route = route[order]
    switching = (np.flatnonzero(env_route[1:] != env_route[:-1]) + 1).tolist()
    env_cost, env_quality = cost[order], quality[order]
    return Envelope(
        cost=env_cost,
        quality=env_quality,
        escalation_rate=escalation[order],
        models=[routes[r] for r in env_route],
        thresholds=[() if np.isnan(t) else (float(t),) for t in threshold[order]],
        switching_points=switching,
        hull=concave_hull(env_cost, env_quality),
        model_names=data.models,
        model_cost=model_cost,
        model_quality=model_quality,
        pool=tuple(name for name, member in zip(data.models, pool, strict=True) if member),
        pairs=curves,
    )


def _candidates(
    data: RunsMatrix, pairs: list[tuple[int, int]], model_cost: np.ndarray, model_quality: np.ndarray
) -> tuple[list[tuple[str, ...]], tuple[np.ndarray, ...], dict[tuple[str, str], FrontierCurve]]:
    """Every candidate point of the envelope: ``(routes, (cost, quality, escalation rate, route id,
    threshold) columns, pair frontiers)``; single models first (route ids 0..k-1), then each pair's
    own Pareto points with some escalation."""
    k = data.quality.shape[1]
    routes: list[tuple[str, ...]] = [(name,) for name in data.models]
    parts_cost = [model_cost]
    parts_quality = [model_quality]
    parts_escalation = [np.zeros(k)]
    parts_route = [np.arange(k)]
    parts_threshold = [np.full(k, np.nan)]
    curves: dict[tuple[str, str], FrontierCurve] = {}
    for low, high in pairs:  # a loop over pairs; each pair's thresholds are handled as arrays
        curve = pair_frontier(
            data.score[:, low],
            data.stage_cost(slice(None), [low])[:, 0],  # L is scored: its call and its scoring
            data.quality[:, low],
            data.cost[:, high],
            data.quality[:, high],
            saving_l=None if data.escalation_saving is None else data.escalation_saving[:, low],
        )
        curves[(data.models[low], data.models[high])] = curve
        # Zero escalation is the single model L itself; within the pair keep its own Pareto set.
        keep = _pareto_mask_sorted(curve.quality) & (curve.escalation_rate > 0)
        routes.append((data.models[low], data.models[high]))
        parts_cost.append(curve.cost[keep])
        parts_quality.append(curve.quality[keep])
        parts_escalation.append(curve.escalation_rate[keep])
        parts_route.append(np.full(int(keep.sum()), len(routes) - 1))
        parts_threshold.append(curve.thresholds[keep])
    columns = tuple(
        np.concatenate(parts)
        for parts in (parts_cost, parts_quality, parts_escalation, parts_route, parts_threshold)
    )
    return routes, columns, curves


def _pareto_mask_sorted(quality: np.ndarray) -> np.ndarray:
    """For points already sorted by cost: keep those strictly better than every earlier point."""
    if quality.size == 0:
        return np.zeros(0, dtype=bool)
    best_before = np.concatenate(([-np.inf], np.maximum.accumulate(quality)[:-1]))
    return quality > best_before + _QUALITY_EPS


def concave_hull(cost: np.ndarray, quality: np.ndarray) -> np.ndarray:
    """Ascending indices of the upper concave hull of increasing points (both ends included).

    Points on a hull segment (collinear) are not vertices. Vectorized peeling: every pass drops,
    at once, each point that is not strictly above the segment joining its current neighbours.
    A true hull vertex is always above that segment, so it is never dropped; while the chain is
    not concave some point is dropped, so the passes end at the hull (a few passes on real data).
    Works on coordinates rescaled to [0, 1] (costs are ~1e-5 USD, qualities ~0.5).
    """
    m = int(cost.shape[0])
    if m <= 2:
        return np.arange(m)
    x = (cost - cost[0]) / (cost[-1] - cost[0])
    y = (quality - quality[0]) / (quality[-1] - quality[0])
    chain = np.arange(m)
    for _ in range(_MAX_PEELING_PASSES):
        if chain.size <= 2:
            return chain
        left, middle, right = chain[:-2], chain[1:-1], chain[2:]
        above = (y[middle] - y[left]) * (x[right] - x[left]) - (y[right] - y[left]) * (x[middle] - x[left])
        keep = above > _HULL_EPS
        if keep.all():
            return chain
        chain = np.concatenate(([chain[0]], middle[keep], [chain[-1]]))
    # Adversarial shapes (one vertex exposed per pass) would need O(m) passes: finish in one scan.
    return chain[_monotone_upper_chain(x[chain], y[chain])]


def _monotone_upper_chain(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Upper hull of points sorted by x (Andrew's monotone chain), same tolerance as the peeling."""
    hull: list[int] = []
    for i in range(x.shape[0]):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            if (y[b] - y[a]) * (x[i] - x[a]) - (y[i] - y[a]) * (x[b] - x[a]) > _HULL_EPS:
                break
            hull.pop()
        hull.append(i)
    return np.asarray(hull)


def non_dominated_models(matrix: RunsMatrix, rows: np.ndarray) -> list[str]:
    """Models not dominated on ``rows`` (another is strictly cheaper and strictly better), by cost.

    The pool the fixed chain and the subsequence search draw from, as in calibration (``compute_envelope``).
    """
    cost = matrix.cost[rows].mean(axis=0)
    dominated = dominated_models(cost, matrix.quality[rows].mean(axis=0))
    keep = [j for j in np.lexsort((np.array(matrix.models), cost)) if not dominated[j]]
    return [matrix.models[j] for j in keep]
