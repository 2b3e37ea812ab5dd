"""Request -> route (docs/contracts.md#choosing-the-route), first match wins:

1. header ``X-Cascade-Max-Cost-Usd: <float>`` -> best envelope point within that expected cost;
2. header ``X-Cascade-Tier: <tier>``;
3. ``model: "cascade/<tier>"``, or ``model: "cascade"`` -> the default tier;
4. ``model: "<configured model>"`` -> plain passthrough (no cascade, no logprobs added).

Anything else is 404 (unknown model); an unknown tier is 400. ``n > 1`` is refused on cascade
routes (400): the decision scores one answer, and local servers reject ``n > 1`` anyway. With the
config's ``coverage.otherwise`` set (gateway.config.coverage), a cascade request the policy does not cover
goes to that model directly instead (tier label ``uncalibrated``), whatever tier or budget it named.

The route, envelope and scorer come from the policy's section for the request's kind
(``policies.tool_calls.request_kind`` of the chat body; a legacy completions request is text) when
the policy has one, else from its top level (``policies.kinds.kind_policy``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from gateway.config.coverage import UNCALIBRATED_TIER, CoverageConfig, covered
from gateway.wire.errors import (
    BadRequestError,
    ModelNotFoundError,
    PolicyUnavailableError,
    UnknownTierRequestError,
)
from gateway.wire.requests import ParsedRequest
from policies import (
    Policy,
    Route,
    UnknownTierError,
    choose_for_budget,
    choose_for_tier,
)
from policies.errors import quoted
from policies.kinds import TOP_LEVEL_KIND, kind_policy, tier_policy
from policies.tool_calls import request_kind

CASCADE_MODEL = "cascade"
_CASCADE_PREFIX = "cascade/"
PASSTHROUGH_TIER = "passthrough"


@dataclass(slots=True)
class RoutePlan:
    """What to do with one request.

    Attributes:
        tier: the metrics/header tier label (a policy tier, ``budget``, ``passthrough`` or
            ``uncalibrated``: outside the policy's coverage, gateway.config.coverage).
        policy: the policy the plan came from, as it serves the request's kind (its section for
            that kind, ``policies.kinds.kind_policy``; None for passthrough).
        route: the chain of configured model names and thresholds (None for passthrough).
        model: the passthrough target (None for cascade routes).
        within_budget: False when a numeric budget was below every envelope point.
        kind: the request's kind (``text``, ``tool_call`` or ``structured_output``).
        mechanism: for a routed tier (``gateway.routing.routed_tiers``), how the route was chosen
            (``routed``, ``hybrid_direct``, ``hybrid_cascade`` or ``fallback``); None otherwise.
        router_probability: the router's predicted probability behind that choice, if any.
        router_features: the request's router features, when they were computed (the learning
            sampler stores them with a sampled request's rows, for ``cascade recalibrate``).
    """

    tier: str
    policy: Policy | None
    route: Route | None
    model: str | None = None
    within_budget: bool = True
    kind: str = TOP_LEVEL_KIND
    mechanism: str | None = None
    router_probability: float | None = None
    router_features: Any = None


class RoutePlanner:
    """Chooses a RoutePlan for each request against the current policy and the configured models."""

    def __init__(
        self,
        models: Collection[str],
        rng: random.Random | None = None,
        coverage: CoverageConfig | None = None,
    ):
        """``models``: the configured model names (passthrough targets); ``coverage``: the config's
        ``coverage`` section (None: the policy serves every cascade request)."""
        self._models = models
        self._rng = rng or random.Random()
        self._coverage = coverage

    def plan(
        self,
        request: ParsedRequest,
        policy: Policy | None,
        max_cost_header: str | None = None,
        tier_header: str | None = None,
        no_policy_reason: str | None = None,
    ) -> RoutePlan:
        """The plan for ``request``; raises the GatewayError the client should see.

        ``no_policy_reason`` explains a missing policy (e.g. the store's last load error).
        """
        kind = request_kind(request.body) if request.api == "chat" else TOP_LEVEL_KIND
        if max_cost_header is not None:
            budget = _parse_budget(max_cost_header)
            checked = self._check_policy(policy, request, no_policy_reason)
            outside = self._uncovered(checked, request, kind)
            if outside is not None:
                return outside
            policy = kind_policy(checked, kind)
            choice = choose_for_budget(policy, budget)
            # An envelope point is scored by the section's scorer; a tier's own serves that tier only.
            served = tier_policy(policy, choice.tier) if not policy.envelope else policy
            return RoutePlan(choice.tier, served, choice.route, within_budget=choice.within_budget, kind=kind)
        tier: str | None
        tier_param = "model"
        if tier_header is not None:
            tier_param = "X-Cascade-Tier"
            tier = tier_header.strip()
        elif request.model == CASCADE_MODEL:
            tier = None
        elif request.model.startswith(_CASCADE_PREFIX):
            tier = request.model[len(_CASCADE_PREFIX) :]
        elif request.model in self._models:
            return RoutePlan(PASSTHROUGH_TIER, None, None, model=request.model, kind=kind)
        else:
            raise ModelNotFoundError(
                f"model {quoted(request.model)} does not exist; use 'cascade', 'cascade/<tier>' or one of "
                f"{', '.join(sorted(self._models))}",
                param="model",
            )
        checked = self._check_policy(policy, request, no_policy_reason)
        outside = self._uncovered(checked, request, kind)
        if outside is not None:
            return outside
        policy = kind_policy(checked, kind)
        try:
            choice = choose_for_tier(policy, tier, self._rng)
        except UnknownTierError as exc:
            raise UnknownTierRequestError(str(exc), param=tier_param) from None
        return RoutePlan(choice.tier, tier_policy(policy, choice.tier), choice.route, kind=kind)

    def _uncovered(self, policy: Policy, request: ParsedRequest, kind: str) -> RoutePlan | None:
        """The direct plan to ``coverage.otherwise`` for a request the policy does not cover, else None."""
        coverage = self._coverage
        if coverage is None or coverage.otherwise is None:
            return None
        if covered(coverage, request.body, kind, policy.kinds or {}):
            return None
        return RoutePlan(UNCALIBRATED_TIER, None, None, model=coverage.otherwise, kind=kind)

    def _check_policy(
        self, policy: Policy | None, request: ParsedRequest, no_policy_reason: str | None
    ) -> Policy:
        if policy is None:
            why = f": {no_policy_reason}" if no_policy_reason else ""
            raise PolicyUnavailableError(
                f"no servable cascade policy is loaded{why}; configured model names still work as passthrough"
            )
        if request.n != 1:
            raise BadRequestError(
                "n > 1 is not supported on cascade routes (one answer is scored per stage); "
                "send n=1, or name a configured model for a plain passthrough",
                param="n",
            )
        return policy


def _parse_budget(value: str) -> float:
    try:
        budget = float(value)
    except ValueError:
        budget = math.nan
    if not math.isfinite(budget) or budget < 0:
        raise BadRequestError(
            f"X-Cascade-Max-Cost-Usd must be a non-negative number of USD, got {quoted(value)}",
            param="X-Cascade-Max-Cost-Usd",
        )
    return budget
