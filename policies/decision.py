"""The decision rule: request -> route, score -> accept or escalate.

Contracts: docs/contracts.md#policy-file and #choosing-the-route.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence
from dataclasses import dataclass

from policies.errors import UnknownTierError
from policies.schema import Policy, Route, Tier


@dataclass(frozen=True, slots=True)
class RouteChoice:
    """The route chosen for one request, and why.

    ``within_budget`` is False when a numeric budget was below every envelope point and the
    cheapest point was served instead (the caller reports it; it is not an error).
    """

    route: Route
    tier: str
    within_budget: bool = True


def tier_for(policy: Policy, tier: str | None) -> tuple[str, Tier]:
    """The named tier (or the default one when ``tier`` is None); UnknownTierError otherwise."""
    name = policy.default_tier if tier is None else tier
    try:
        return name, policy.tiers[name]
    except KeyError:
        raise UnknownTierError(name, list(policy.tiers)) from None


def draw_route(routes: Sequence[Route], rng: random.Random | None = None) -> Route:
    """Pick one route of a (possibly randomized) tier with probability equal to its weight."""
    if len(routes) == 1:
        return routes[0]
    draw = (rng or random).random()
    cumulative = 0.0
    for route in routes:
        cumulative += route.weight
        if draw < cumulative:
            return route
    return routes[-1]  # float round-off: weights sum to 1 within tolerance


def choose_for_tier(policy: Policy, tier: str | None, rng: random.Random | None = None) -> RouteChoice:
    """Route for a named tier (None = default tier), drawing among mixture routes by weight."""
    name, spec = tier_for(policy, tier)
    return RouteChoice(route=draw_route(spec.routes, rng), tier=name)


class BudgetIndex:
    """Per-policy lookup table answering "best envelope point within budget" in O(log m).

    ``best_upto[i]`` is the index of the highest-quality point among the first i+1 (cost-sorted)
    points, the cheaper one on a tie, so a budget lookup is one bisect. Routes are built once,
    not per request.
    """

    __slots__ = ("best_upto", "costs", "routes")

    def __init__(self, policy: Policy):
        self.costs = [point.cost_usd for point in policy.envelope]
        self.routes = [point.as_route() for point in policy.envelope]
        self.best_upto: list[int] = []
        best = 0
        for i, point in enumerate(policy.envelope):
            if point.quality > policy.envelope[best].quality:
                best = i
            self.best_upto.append(best)

    def lookup(self, max_cost_usd: float) -> tuple[Route, bool]:
        """(route, within_budget) for a budget in USD per request."""
        # `not >=` also catches NaN, which bisect would place after every point.
        if not max_cost_usd >= self.costs[0]:
            return self.routes[0], False
        affordable = bisect.bisect_right(self.costs, max_cost_usd)
        return self.routes[self.best_upto[affordable - 1]], True


def budget_index(policy: Policy) -> BudgetIndex:
    """The BudgetIndex of a loaded policy, built once and kept by the policy object."""
    return policy.derived("budget_index", lambda: BudgetIndex(policy))


def choose_for_budget(policy: Policy, max_cost_usd: float) -> RouteChoice:
    """Best envelope point whose expected cost is within ``max_cost_usd`` USD per request.

    "Best" is the highest calibrated quality among the affordable points (the cheaper one on a
    tie). On a proper frontier that is the last point at or below the budget, but the schema only
    guarantees cost order, so quality is compared rather than assumed increasing. Below the
    cheapest point, the cheapest is served with ``within_budget=False``. A policy without an
    envelope falls back to the default tier.
    """
    if not policy.envelope:
        return choose_for_tier(policy, None)
    route, within = budget_index(policy).lookup(max_cost_usd)
    return RouteChoice(route=route, tier="budget", within_budget=within)


def should_escalate(score: float | None, threshold: float, on_missing_score: str) -> bool:
    """Escalate iff score < threshold (strict, as the paper); a missing score follows the policy."""
    if score is None:
        return on_missing_score == "escalate"
    return score < threshold
