"""Per tier, choose between the cascade, the router and route-then-cascade, on held-out data.

For every tier objective each mechanism is solved on the calibration rows exactly as it would be
served, and measured out of sample with the protocol of ``calibration.heldout_expected`` (the same
splits: fitted and chosen on each split's calibration part, measured on its test part):

* ``cascade``: the tier as ``cascade calibrate`` solves it (its held-out expectation is given);
* ``routed``: the router (``calibration.routing.fit``) and its price weight lambda, the one whose
  routes are best within the budget on calibration (``calibration.routing.routed``);
* ``hybrid``: route-then-cascade (``calibration.routing.hybrid``): a pool pair, the router
  probability below which the strong model is called directly, and the cascade threshold.

The rule: among the mechanisms whose held-out mean cost stays within the tier's budget (or within
the cascade's own held-out cost, when the cascade overruns), the one with the highest held-out
mean quality; ties go to the cascade, then the router. A ``min_quality`` tier takes the cheapest
mechanism whose held-out mean quality reaches it (the cascade when none does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from calibration.heldout_expected import HeldoutSettings, heldout_document, protocol_splits
from calibration.routing.fit import DEFAULT_COMPONENTS, fit_linear_router
from calibration.routing.hybrid import HybridCandidates, hybrid_candidates, hybrid_outcomes
from calibration.routing.routed import lambda_sweep, route_choices, routed_outcomes
from calibration.runs import RunsMatrix
from calibration.tiers import TierObjective, TiersSpec
from policies.router import LinearRouter, goes_direct, served_route
from policies.routing_schema import TierRouting
from policies.score_distribution import bin_counts, decile_edges

MECHANISMS = ("cascade", "routed", "hybrid")
# The routing fields that decide a request's route (the rest describe the calibration).
_SERVED_FIELDS = ("mechanism", "price_weight", "models", "threshold", "direct_below")


@dataclass(frozen=True)
class RoutingOptions:
    """What ``cascade calibrate --mechanisms`` asks for: the mechanisms allowed, the feature set the
    matrix's ``features`` hold, the principal components the router keeps, the fitting seed."""

    mechanisms: tuple[str, ...]
    feature_set: str
    components: int | None = DEFAULT_COMPONENTS
    seed: int = 0


@dataclass(frozen=True)
class MechanismChoice:
    """One tier's routing choice: ``mechanism`` (``routed``/``hybrid``, or ``cascade`` for none),
    its policy ``routing`` fields, in-sample ``expected`` (cost, quality, escalation rate), held-out
    documents per measure, and every mechanism's held-out mean cost and quality (``compared``)."""

    mechanism: str
    routing: dict[str, Any] | None
    expected: tuple[float, float, float] | None
    heldout: dict[str, Any] | None
    compared: dict[str, dict[str, float]]


@dataclass(frozen=True)
class MechanismCurves:
    """The router's and route-then-cascade's cost-quality frontiers on every calibration row (in
    sample, as the cascade envelope is): the router over its price sweep, the hybrid over its
    candidates; each sorted by cost, quality rising (``frontier``). For the envelope plot."""

    routed_cost: np.ndarray
    routed_quality: np.ndarray
    hybrid_cost: np.ndarray
    hybrid_quality: np.ndarray


def frontier(cost: np.ndarray, quality: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The candidates no cheaper one matches in quality, by cost (ties: the better first)."""
    order = np.lexsort((-quality, cost))
    best = np.maximum.accumulate(quality[order])
    keep = np.r_[True, best[1:] > best[:-1]]
    return cost[order][keep], best[keep]


def pick_candidate(cost: np.ndarray, quality: np.ndarray, objective: TierObjective) -> int:
    """Index of the candidate a tier takes: best quality within the budget (the cheapest when none
    fits), or the cheapest reaching ``min_quality`` (the best when none does); ties: cheaper."""
    order = np.lexsort((-quality, cost))
    if objective.max_cost_usd is not None:
        fits = order[cost[order] <= objective.max_cost_usd * (1 + 1e-9)]
        if fits.size == 0:
            return int(order[0])
        return int(fits[np.lexsort((cost[fits], -quality[fits]))[0]])
    assert objective.min_quality is not None
    reach = order[quality[order] >= objective.min_quality]
    if reach.size == 0:
        return int(np.lexsort((cost, -quality))[0])
    return int(reach[0])


class _Fitted:
    """A router fitted on some rows, and both mechanisms' candidates on those rows."""

    def __init__(self, matrix: RunsMatrix, rows: np.ndarray, options: RoutingOptions):
        assert matrix.features is not None
        self.router: LinearRouter = fit_linear_router(
            matrix.features[rows],
            matrix.quality[rows],
            matrix.models,
            options.feature_set,
            components=options.components,
            seed=options.seed,
        )
        p = self.router.probabilities(matrix.features[rows])
        self.model_cost = matrix.cost[rows].mean(axis=0)
        self.lambdas = lambda_sweep(self.model_cost)
        choices = route_choices(p, self.model_cost, self.lambdas)
        self.routed_cost, self.routed_quality = routed_outcomes(
            choices, matrix.cost[rows], matrix.quality[rows]
        )
        self.hybrid: HybridCandidates = hybrid_candidates(matrix, rows, p)


def _routed_on(matrix: RunsMatrix, fitted: _Fitted, lam: float, rows: np.ndarray) -> np.ndarray:
    assert matrix.features is not None
    p = fitted.router.probabilities(matrix.features[rows])
    choice = route_choices(p, fitted.model_cost, np.array([lam]))
    cost, quality = routed_outcomes(choice, matrix.cost[rows], matrix.quality[rows])
    return np.array([cost[0], quality[0], 0.0])


def _hybrid_on(matrix: RunsMatrix, fitted: _Fitted, index: int, rows: np.ndarray) -> np.ndarray:
    assert matrix.features is not None
    p = fitted.router.probabilities(matrix.features[rows])
    cost, quality = hybrid_outcomes(matrix, rows, p, fitted.hybrid, np.array([index]))
    h = fitted.hybrid
    low = int(h.low[index])
    escalated = 0.0
    if low != int(h.high[index]):
        direct = goes_direct(p[:, low], h.tau[index])
        escalated = float((~direct & (matrix.score[rows, low] < h.threshold[index])).mean())
    return np.array([cost[0], quality[0], escalated])


def choose_mechanisms(
    matrix: RunsMatrix,
    spec: TiersSpec,
    cascade_heldout: Mapping[str, Mapping[str, Any]],
    options: RoutingOptions,
    settings: HeldoutSettings,
) -> tuple[LinearRouter, dict[str, MechanismChoice], MechanismCurves]:
    """The router fitted on every row, each tier's choice (module docstring), and both mechanisms'
    in-sample frontiers."""
    if matrix.features is None:
        raise ValueError("routing mechanisms need per-query features (--prompts and --features)")
    everything = np.arange(matrix.n_queries)
    full = _Fitted(matrix, everything, options)
    splits = protocol_splits(matrix, settings)
    outcomes = {(tier, m): np.empty((len(splits), 3)) for tier in spec.tiers for m in ("routed", "hybrid")}
    for s, split in enumerate(splits):
        fitted = _Fitted(matrix, split.calibration, options)
        for tier, objective in spec.tiers.items():
            for m in ("routed", "hybrid"):
                outcomes[tier, m][s] = _chosen_on(m, matrix, fitted, objective, split.test)[1]

    choices = {}
    for tier, objective in spec.tiers.items():
        means = {
            "cascade": (cascade_heldout[tier]["cost_usd"]["mean"], cascade_heldout[tier]["quality"]["mean"])
        }
        for m in ("routed", "hybrid"):
            means[m] = (float(outcomes[tier, m][:, 0].mean()), float(outcomes[tier, m][:, 1].mean()))
        allowed = [m for m in MECHANISMS if m == "cascade" or m in options.mechanisms]
        chosen = held_out_choice(means, allowed, objective)
        compared = {m: {"cost_usd": means[m][0], "quality": means[m][1]} for m in allowed}
        if chosen == "cascade":
            choices[tier] = MechanismChoice("cascade", None, None, None, compared)
            continue
        heldout = heldout_document(outcomes[tier, chosen], settings)
        routing, expected = _chosen_on(chosen, matrix, full, objective, everything)
        routing["compared"] = compared
        routing["probability"] = probability_bins(full.router, matrix.features, routing, full.model_cost)
        choices[tier] = MechanismChoice(chosen, routing, tuple(expected), heldout, compared)
    curves = MechanismCurves(
        *frontier(full.routed_cost, full.routed_quality), *frontier(full.hybrid.cost, full.hybrid.quality)
    )
    return full.router, choices, curves


def _chosen_on(
    mechanism: str, matrix: RunsMatrix, fitted: _Fitted, objective: TierObjective, rows: np.ndarray
) -> tuple[dict[str, Any], np.ndarray]:
    """The candidate of ``mechanism`` (``routed`` or ``hybrid``) a tier with ``objective`` takes
    among ``fitted``'s: its policy routing fields, and its (cost, quality, escalation rate) on
    ``rows``."""
    if mechanism == "routed":
        lam = float(fitted.lambdas[pick_candidate(fitted.routed_cost, fitted.routed_quality, objective)])
        return {"mechanism": "routed", "price_weight": lam}, _routed_on(matrix, fitted, lam, rows)
    index = pick_candidate(fitted.hybrid.cost, fitted.hybrid.quality, objective)
    return _hybrid_fields(fitted.hybrid, index, matrix.models), _hybrid_on(matrix, fitted, index, rows)


def held_out_choice(
    means: Mapping[str, tuple[float, float]], allowed: Sequence[str], objective: TierObjective
) -> str:
    """The mechanism a tier takes (module docstring); ``means``: held-out (cost, quality)."""
    if objective.max_cost_usd is not None:
        ceiling = max(objective.max_cost_usd, means["cascade"][0]) * (1 + 1e-9)
        eligible = [m for m in allowed if means[m][0] <= ceiling]
        return max(eligible, key=lambda m: (means[m][1], -allowed.index(m)))
    assert objective.min_quality is not None
    reach = [m for m in allowed if means[m][1] >= objective.min_quality]
    if not reach:
        return "cascade"
    return min(reach, key=lambda m: (means[m][0], allowed.index(m)))


def _hybrid_fields(candidates: HybridCandidates, index: int, models: Sequence[str]) -> dict[str, Any]:
    low, high = int(candidates.low[index]), int(candidates.high[index])
    if low == high:
        return {"mechanism": "hybrid", "models": [models[low]]}
    return {
        "mechanism": "hybrid",
        "models": [models[low], models[high]],
        "threshold": float(candidates.threshold[index]),
        "direct_below": float(candidates.tau[index]),
    }


def probability_bins(
    router: LinearRouter, features: np.ndarray, routing: Mapping[str, Any], model_cost: Sequence[float]
) -> dict[str, list[float]]:
    """A routed tier's ``routing.probability``: the bins (deciles) of the probability the gateway
    reports for each of these rows (``policies.router.served_route``: routed, the chosen model's;
    hybrid, the first model's) and their shares, which the drift metric compares with."""
    fields = {name: routing[name] for name in _SERVED_FIELDS if name in routing}
    served = TierRouting.model_construct(**fields)  # the fields as the policy will carry them
    p = router.probabilities(features)
    values = np.array([served_route(served, router, row, model_cost).probability for row in p])
    edges = decile_edges(values)
    counts = bin_counts(edges, values)
    return {"edges": edges, "proportions": [float(v) for v in counts / counts.sum()]}


def router_document(
    router: LinearRouter, model_cost: Sequence[float], components: int | None
) -> dict[str, Any]:
    """The policy's ``router`` section (``policies.routing_schema.RouterSpec``)."""
    return {
        "features": router.features,
        "components": components,
        "models": list(router.models),
        "cost_usd": [float(c) for c in model_cost],
        "coef": [[float(v) for v in row] for row in router.coef],
        "intercept": [float(v) for v in router.intercept],
    }
