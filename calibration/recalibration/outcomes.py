"""A policy's tiers scored query by query on the rows of a runs matrix.

A tier with ``routing`` is scored as its router serves it (``recalibration.routed_outcomes``).
A tier with several routes is a randomized mixture: each query's outcome is the weighted mean of
its routes' outcomes (the expectation over the gateway's draw), which is what the tier's mean
converges to and has less noise than simulating the draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calibration.frontier import chain_per_query
from calibration.recalibration.routed_outcomes import RoutedOutcomeError, routed_tier_outcomes
from calibration.runs import RunsMatrix
from policies.schema import Policy, Tier


class PolicyOutcomeError(Exception):
    """A policy cannot be evaluated on these runs (one-line message)."""


@dataclass(frozen=True)
class TierOutcomes:
    """Per-query outcome of one tier: cost (USD), quality and escalated share, each ``(n,)``."""

    cost: np.ndarray
    quality: np.ndarray
    escalated: np.ndarray


def tier_outcomes(tier: Tier, matrix: RunsMatrix, rows: np.ndarray) -> TierOutcomes:
    """Outcome of every query of ``rows`` under ``tier``'s routes (weights summed per query). A
    ``fallback`` tier serves its first model's answer: a recorded answer is one whose call did not
    fail, so offline the next model is never called."""
    rows = np.asarray(rows)
    cost = np.zeros(rows.size)
    quality = np.zeros(rows.size)
    escalated = np.zeros(rows.size)
    fallback = tier.mechanism == "fallback"
    for route in tier.routes:  # one or two routes; each is vectorized over queries
        served = route.models[:1] if fallback else route.models
        columns = np.array([matrix.model_index(name) for name in served])
        block = np.ix_(rows, columns)
        route_cost, route_quality, route_escalated = chain_per_query(
            matrix.score[block],
            matrix.cost[block],
            matrix.quality[block],
            [] if fallback else route.thresholds,
            scoring=matrix.scoring(rows, columns.tolist()),
            saving=matrix.saving(rows, columns.tolist()),
        )
        cost += route.weight * route_cost
        quality += route.weight * route_quality
        escalated += route.weight * route_escalated
    return TierOutcomes(cost, quality, escalated)


def policy_outcomes(policy: Policy, matrix: RunsMatrix, rows: np.ndarray) -> dict[str, TierOutcomes]:
    """Every tier of ``policy`` as served: ``tier_outcomes``, or for a tier with ``routing`` its
    router's (``calibration.recalibration.routed_outcomes``); PolicyOutcomeError if it routes to a
    missing model or a routed tier cannot be scored."""
    routed = {m for tier in policy.tiers.values() for route in tier.routes for m in route.models}
    if policy.router is not None:
        routed |= set(policy.router.models)
    missing = [m for m in sorted(routed) if m not in matrix.models]
    if missing:
        raise PolicyOutcomeError(
            f"policy {policy.policy_id} routes to {', '.join(missing)}, which the traffic has no rows for "
            f"(its models: {', '.join(matrix.models)})"
        )
    outcomes = {}
    for name, tier in policy.tiers.items():
        if tier.routing is None:
            outcomes[name] = tier_outcomes(tier, matrix, rows)
            continue
        try:
            outcomes[name] = TierOutcomes(*routed_tier_outcomes(policy, name, tier, matrix, np.asarray(rows)))
        except RoutedOutcomeError as exc:
            raise PolicyOutcomeError(str(exc)) from None
    return outcomes
