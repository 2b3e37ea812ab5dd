"""A routed or route-then-cascade tier scored query by query, as the gateway serves it.

A tier with ``routing`` (``policies.schema.TierRouting``) is served by the policy's router
(``gateway.routing.routed_tiers``); its ``routes`` are only the fallback. So ``cascade recalibrate`` scores
it with the router on each query's features (the traffic rows' ``route``, ``traffic.rows``), with
the serving rules themselves (``policies.router``):

* ``routed``: the one model of ``routed_choice``: its cost and quality, never escalated;
* ``hybrid``: a query with ``p_cheap < direct_below`` is the strong model's; any other runs the
  cascade cheap -> strong at the tier's threshold (``calibration.frontier.chain_per_query``).

Which route each query takes is ``policies.router.served_route``, the gateway's rule.
"""

from __future__ import annotations

import numpy as np

from calibration.frontier import chain_per_query
from calibration.runs import RunsMatrix
from policies.router import LinearRouter, served_route
from policies.schema import Policy, Tier


class RoutedOutcomeError(Exception):
    """A routed tier cannot be scored on these runs (one-line message)."""


def linear_router(policy: Policy) -> LinearRouter:
    """The policy's ``router`` as the gateway evaluates it."""
    spec = policy.router
    assert spec is not None
    return LinearRouter.from_spec(spec)


def routed_tier_outcomes(
    policy: Policy, name: str, tier: Tier, matrix: RunsMatrix, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-query ``(cost, quality, escalated)`` of tier ``name`` on ``rows`` (module docstring)."""
    routing, spec = tier.routing, policy.router
    assert routing is not None
    if spec is None:
        raise RoutedOutcomeError(f"policy {policy.policy_id}: tier '{name}' routes but has no router")
    width = len(spec.coef[0]) if spec.coef else 0
    if matrix.features is None or matrix.features.shape[1] != width:
        raise RoutedOutcomeError(
            f"policy {policy.policy_id} serves tier '{name}' with its {spec.features} router, and the "
            f"traffic's rows carry no {spec.features} features for it (route column)"
        )
    rows = np.asarray(rows)
    router = linear_router(policy)
    served = [
        served_route(routing, router, p, spec.cost_usd) for p in router.probabilities(matrix.features[rows])
    ]
    alone = np.array([matrix.model_index(route.models[-1]) for route in served], dtype=np.int64)
    cost, quality = matrix.cost[rows, alone], matrix.quality[rows, alone]
    cascaded = np.array([len(route.models) == 2 for route in served], dtype=bool)
    if not cascaded.any():
        return cost, quality, np.zeros(rows.size)
    assert routing.models is not None and routing.threshold is not None
    pair = [matrix.model_index(m) for m in routing.models]
    block = np.ix_(rows, np.array(pair))
    chain_cost, chain_quality, escalated = chain_per_query(
        matrix.score[block],
        matrix.cost[block],
        matrix.quality[block],
        [routing.threshold],
        scoring=matrix.scoring(rows, pair),
    )
    return (
        np.where(cascaded, chain_cost, cost),
        np.where(cascaded, chain_quality, quality),
        np.where(cascaded, escalated, 0.0),
    )
