"""A routed or route-then-cascade tier scored query by query, as the gateway serves it.

A tier with ``routing`` (``policies.schema.TierRouting``) is served by the policy's router
(``gateway.routing.routed_tiers``); its ``routes`` are only the fallback. So ``cascade recalibrate`` scores
it with the router on each query's features (the traffic rows' ``route``, ``traffic.rows``), with
the serving rules themselves (``policies.router``):

* ``routed``: the one model of ``routed_choice``: its cost and quality, never escalated;
* ``hybrid``: a query with ``p_cheap < direct_below`` is the strong model's; any other runs the
  cascade cheap -> strong at the tier's threshold (``calibration.frontier.chain_per_query``).
"""

from __future__ import annotations

import numpy as np

from calibration.frontier import chain_per_query
from calibration.runs import RunsMatrix
from policies.router import LinearRouter, routed_choice
from policies.schema import Policy, Tier


class RoutedOutcomeError(Exception):
    """A routed tier cannot be scored on these runs (one-line message)."""


def linear_router(policy: Policy) -> LinearRouter:
    """The policy's ``router`` as the gateway evaluates it."""
    spec = policy.router
    assert spec is not None
    return LinearRouter(spec.features, tuple(spec.models), np.asarray(spec.coef), np.asarray(spec.intercept))


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
    p = router.probabilities(matrix.features[rows])
    columns = [matrix.model_index(m) for m in router.models]
    if routing.mechanism == "routed":
        assert routing.price_weight is not None
        chosen = np.array([columns[routed_choice(row, spec.cost_usd, routing.price_weight)] for row in p])
        return matrix.cost[rows, chosen], matrix.quality[rows, chosen], np.zeros(rows.size)
    assert routing.models is not None
    strong = matrix.model_index(routing.models[-1])
    if len(routing.models) == 1:
        return matrix.cost[rows, strong], matrix.quality[rows, strong], np.zeros(rows.size)
    assert routing.threshold is not None and routing.direct_below is not None
    cheap = matrix.model_index(routing.models[0])
    block = np.ix_(rows, np.array([cheap, strong]))
    cost, quality, escalated = chain_per_query(
        matrix.score[block],
        matrix.cost[block],
        matrix.quality[block],
        [routing.threshold],
        scoring=matrix.scoring(rows, [cheap, strong]),
    )
    direct = p[:, router.models.index(routing.models[0])] < routing.direct_below
    return (
        np.where(direct, matrix.cost[rows, strong], cost),
        np.where(direct, matrix.quality[rows, strong], quality),
        np.where(direct, 0.0, escalated),
    )
