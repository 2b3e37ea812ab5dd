"""What each tier promises at a confidence level: one-sided bounds, certified on queries it was not
chosen on.

The procedure (docs/calibrate.md#bounds): the queries are split once, stratified by ``dataset``
(``calibration.splits``, the first split of the held-out protocol's seed), into a *selection* part
and a *certification* part. On the selection part each tier is solved exactly as ``cascade
calibrate`` solves it (envelope, route or mixture, threshold), and that route is the one the tier
serves: a bound holds for the route it was certified for, not for a route refitted on every query.
The route is run on the certification part, which played no part in choosing it, and four
statements are bounded there,
each at ``(1 - confidence) / 4`` so that all four hold together with ``confidence`` (Bonferroni):

* mean quality >= ``quality_min`` (Clopper-Pearson for 0/1 grades, Hoeffding-Bentkus otherwise);
* mean cost per request <= ``cost_max``: Hoeffding-Bentkus on costs divided by ``cost_range``, the
  tier's worst-case cost of one request (every stage of its route called, the largest over the
  runs' queries);
* escalation rate within ``escalation`` (a lower and an upper bound, exact for a deterministic
  route, Hoeffding-Bentkus for a mixture's per-query shares).

The tier's objective is the target: a ``min_quality`` tier is certified when ``quality_min``
reaches it, a ``max_cost_usd`` tier when ``cost_max`` stays within it. When it is not, the tier
says how many more labelled queries would make it certifiable at the observed certification mean
(``stats.bounds.queries_needed``), or that none would (the observed mean misses the target).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from calibration.envelope import compute_envelope
from calibration.frontier import chain_per_query
from calibration.heldout_expected import solve_or_best
from calibration.runs import RunsMatrix
from calibration.splits import stratified_splits
from calibration.tiers import TierObjective, TierSolution, TiersSpec
from stats.bounds import bonferroni, mean_lower_bound, mean_upper_bound, queries_needed

STATEMENTS = 4  # quality >=, cost <=, escalation >=, escalation <=


@dataclass(frozen=True)
class BoundSettings:
    """The confidence the operator asks for and the split (``cascade calibrate --confidence``).

    ``alternatives``: how many ways of serving each tier (commit rules, mechanisms) calibration
    chooses among on held-out splits that include the certification part; the union bound covers
    all of them, so the bounds of whichever is chosen hold."""

    confidence: float = 0.95
    test_fraction: float = 0.5
    seed: int = 0
    alternatives: int = 1


@dataclass(frozen=True)
class RouteOutcomes:
    """A tier's route(s) on some queries, per query: cost, quality, escalated share (each (n,))."""

    cost: np.ndarray
    quality: np.ndarray
    escalated: np.ndarray


def route_outcomes(matrix: RunsMatrix, solution: TierSolution, rows: np.ndarray) -> RouteOutcomes:
    """Each query's expected outcome under the tier's route(s), weighted by each route's share."""
    cost, quality, escalated = (np.zeros(rows.size) for _ in range(3))
    for share in solution.routes:
        columns = [matrix.model_index(name) for name in share.models]
        c, q, e = chain_per_query(
            matrix.score[rows][:, columns],
            matrix.cost[rows][:, columns],
            matrix.quality[rows][:, columns],
            share.thresholds,
            scoring=matrix.scoring(rows, columns),
            saving=matrix.saving(rows, columns),
        )
        cost += share.weight * c
        quality += share.weight * q
        escalated += share.weight * e
    return RouteOutcomes(cost, np.clip(quality, 0.0, 1.0), np.clip(escalated, 0.0, 1.0))


def worst_case_cost(matrix: RunsMatrix, solution: TierSolution) -> float:
    """The most one request of this tier cost on any query of the runs with every stage called."""
    rows = np.arange(matrix.n_queries)
    worst = 0.0
    for share in solution.routes:
        columns = [matrix.model_index(name) for name in share.models]
        always = [math.inf] * (len(columns) - 1)
        cost, _, _ = chain_per_query(
            matrix.score[:, columns],
            matrix.cost[:, columns],
            matrix.quality[:, columns],
            always,
            scoring=matrix.scoring(rows, columns),
        )
        worst = max(worst, float(cost.max()))
    return worst


@dataclass(frozen=True)
class CertifiedTiers:
    """Each tier's route as chosen on the selection part (what the tier serves) and its bounds
    (``policies.schema.Bounds`` fields)."""

    solutions: dict[str, TierSolution]
    bounds: dict[str, dict[str, Any]]


def tier_bounds(
    matrix: RunsMatrix, spec: TiersSpec, settings: BoundSettings, *, randomize: bool = False
) -> dict[str, dict[str, Any]]:
    """``{tier: Bounds document}`` for every tier of ``spec`` (``certify_tiers``)."""
    return certify_tiers(matrix, spec, settings, randomize=randomize).bounds


def certify_tiers(
    matrix: RunsMatrix, spec: TiersSpec, settings: BoundSettings, *, randomize: bool = False
) -> CertifiedTiers:
    """Every tier of ``spec`` solved on the selection part and certified on the other (module
    docstring). The solutions' cost, quality and escalation rate are measured on every query.

    Raises ValueError when the queries cannot be split (fewer than two, or a part left empty).
    """
    split = stratified_splits(
        matrix.n_queries,
        n_splits=1,
        test_fraction=settings.test_fraction,
        seed=settings.seed,
        strata=matrix.strata,
    )[0]
    envelope = compute_envelope(matrix, rows=split.calibration)
    documents, solutions = {}, {}
    everything = np.arange(matrix.n_queries)
    for name, objective in spec.tiers.items():
        solution = solve_or_best(envelope, objective, randomize, name)
        whole = route_outcomes(matrix, solution, everything)
        solutions[name] = replace(
            solution,
            cost=float(whole.cost.mean()),
            quality=float(whole.quality.mean()),
            escalation_rate=float(whole.escalated.mean()),
        )
        outcomes = route_outcomes(matrix, solution, split.test)
        documents[name] = certify(
            outcomes,
            worst_case_cost(matrix, solution),
            objective,
            settings,
            selection_n=int(split.calibration.size),
            total_n=matrix.n_queries,
        )
    return CertifiedTiers(solutions, documents)


def certify(
    outcomes: RouteOutcomes,
    cost_range: float,
    objective: TierObjective,
    settings: BoundSettings,
    *,
    selection_n: int,
    total_n: int,
) -> dict[str, Any]:
    """The Bounds document of a route's outcomes on certification queries (module docstring)."""
    delta = bonferroni(settings.confidence, STATEMENTS * settings.alternatives)
    quality = mean_lower_bound(outcomes.quality, delta)
    span = max(cost_range, float(outcomes.cost.max()), 1e-300)
    cost = mean_upper_bound(outcomes.cost, delta, upper=span)
    esc_low = mean_lower_bound(outcomes.escalated, delta)
    esc_high = mean_upper_bound(outcomes.escalated, delta)
    document: dict[str, Any] = {
        "confidence": settings.confidence,
        "method": "split",
        "n": quality.n,
        "selection_n": selection_n,
        "seed": settings.seed,
        "statements": STATEMENTS * settings.alternatives,
        "estimators": {"quality": quality.method, "cost_usd": cost.method, "escalation_rate": esc_low.method},
        "quality_min": min(1.0, max(0.0, quality.value)),
        "cost_max": max(0.0, cost.value),
        "cost_range": span,
        "escalation": [max(0.0, esc_low.value), min(1.0, esc_high.value)],
    }
    if objective.min_quality is not None:
        target = objective.min_quality
        certified = quality.value >= target
        needed = None
        if not certified:
            needed = queries_needed(quality.mean, target, delta, side="lower", method=quality.method)
        document["target"] = f"quality >= {target:g}"
    else:
        assert objective.max_cost_usd is not None
        target = objective.max_cost_usd
        certified = cost.value <= target * (1 + 1e-9)
        needed = None
        if not certified:
            needed = queries_needed(cost.mean / span, target / span, delta, side="upper", method=cost.method)
        document["target"] = f"cost <= {target:g}"
    document["target_certified"] = certified
    if needed is not None:  # certification queries -> labelled queries at this split's share
        labelled = math.ceil(needed / settings.test_fraction)
        document["more_queries"] = max(1, labelled - total_n)
    return document


def uncertified_note(tier: str, bounds: dict[str, Any]) -> str | None:
    """The line ``cascade calibrate`` prints for a tier whose target the bounds do not prove."""
    if bounds.get("target_certified") is not False:
        return None
    level = f"{bounds['confidence']:.0%}"
    head = f"tier '{tier}': {bounds['target']} is not certifiable at {level} with n={bounds['n']}"
    more = bounds.get("more_queries")
    if more is None:
        return f"{head}; its certification mean misses the target, so more labelled queries would not help"
    return f"{head}; about {more:,} more labelled queries would make it feasible"


def attach_bounds(
    tier_documents: dict[str, dict[str, Any]], bounds: dict[str, dict[str, Any]] | None
) -> None:
    """Put each tier's bounds into its ``expected`` (in place); nothing for None."""
    if bounds is None:
        return
    for name, document in tier_documents.items():
        if name in bounds:
            document["expected"]["bounds"] = bounds[name]
