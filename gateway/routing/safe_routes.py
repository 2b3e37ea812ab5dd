"""The safe route of a tier whose shift alarm is set (gateway.config.shift_alarm,
docs/operations.md#shift-alarm).

``SafeRoutes.plan`` is called for every planned request while some tier is alarmed: a request of an
alarmed tier whose action is ``safe_route`` gets, instead of its cascade, ``strong`` (the route's
last model alone: no score, no escalation, its cost) or ``buffered`` (the same cascade and
threshold with the tier's prefix commit rule off: the cheap answer is read whole before the
decision; the threshold was calibrated on prefixes, so this trades first-token time for a decision
on the whole answer, not a calibrated route). Each safe plan's parts are built once per (policy,
tier) and reused.
"""

from __future__ import annotations

from dataclasses import replace

from gateway.config.shift_alarm import ShiftAlarms
from gateway.routing.tier_choice import RoutePlan
from policies import Policy, Route


class SafeRoutes:
    """Rewrites the plans of alarmed tiers (see the module docstring)."""

    def __init__(self, alarms: ShiftAlarms):
        self._alarms = alarms
        self._built: dict[tuple[int, str, tuple[str, ...]], tuple[Policy, Route]] = {}

    def plan(self, plan: RoutePlan) -> RoutePlan:
        """``plan``, or its tier's safe plan when the tier is alarmed and its action says so."""
        alarms = self._alarms
        if plan.tier not in alarms.alarmed or plan.policy is None or plan.route is None:
            return plan
        if plan.policy.policy_id != alarms.policy_id or len(plan.route.models) < 2:
            return plan
        action = alarms.config.for_tier(plan.tier)
        if action.action != "safe_route":
            return plan
        key = (id(plan.policy), plan.tier, tuple(plan.route.models))
        built = self._built.get(key)
        if built is None:
            if len(self._built) > 64:  # old policies' plans: never many, dropped together
                self._built.clear()
            built = self._built[key] = _safe_parts(plan, action.safe_route)
        policy, route = built
        return replace(plan, policy=policy, route=route)


def _safe_parts(plan: RoutePlan, safe_route: str) -> tuple[Policy, Route]:
    """The (policy, route) of ``plan``'s safe plan."""
    policy, route = plan.policy, plan.route
    assert policy is not None and route is not None
    if safe_route == "strong":
        return policy, Route(weight=1.0, models=[route.models[-1]])
    tier = policy.tiers.get(plan.tier)
    if tier is None or tier.commit is None:
        return policy, route
    buffered = tier.model_copy(update={"commit": None})
    return policy.model_copy(update={"tiers": {**policy.tiers, plan.tier: buffered}}), route
