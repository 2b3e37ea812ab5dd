"""What one gateway app owns: settings, metrics, upstream pool, router, cascade engine, shared state."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from gateway.cascade import CascadeEngine
from gateway.config import Settings
from gateway.logs import configure_logging, log_event
from gateway.metrics import GatewayMetrics
from gateway.requests import DEFAULT_COMPLETION_BOUND, ParsedRequest, completion_cap
from gateway.routing import RoutePlan, Router
from gateway.upstream import UpstreamPool
from policies import Policy


class Gateway:
    """Everything one app instance owns: settings, metrics, upstream pool, router, engine, shared state."""

    def __init__(self, settings: Settings, rng: random.Random | None = None):
        self.settings = settings
        self.metrics = GatewayMetrics(
            with_redis=bool(settings.redis_url or settings.policy_is_redis), drift=settings.drift
        )
        self.pool = UpstreamPool(settings, self.metrics)
        self.router = Router(settings, rng)
        self.engine = CascadeEngine(settings, self.pool, self.metrics)
        self.shared: Any = None  # gateway.state.SharedState once started
        self.loop: asyncio.AbstractEventLoop | None = None  # the serving loop, once started

    async def start(self) -> None:
        """Open upstream sessions, build and start the shared state (initial policy load)."""
        from gateway.state import build_shared_state

        configure_logging(self.settings.logging.level)
        self.loop = asyncio.get_running_loop()
        await self.pool.start()
        self.shared = await build_shared_state(
            self.settings, on_policy_loaded=self._policy_loaded, on_policy_failure=self._policy_failed
        )
        await self.shared.start()
        policy = self.policy
        log_event(
            "gateway_started",
            models=sorted(self.settings.models),
            policy_id=policy.policy_id if policy else None,
        )

    async def close(self) -> None:
        """Stop watchers, close Redis and upstream sessions."""
        if self.shared is not None:
            await self.shared.close()
        await self.pool.close()

    @property
    def policy(self) -> Policy | None:
        """The policy being served now (None until one loads)."""
        return self.shared.policy_store.current if self.shared is not None else None

    def no_policy_reason(self) -> str | None:
        """Why no policy is served (the store's last load error), when none is."""
        if self.shared is None or self.shared.policy_store.current is not None:
            return None
        return self.shared.policy_store.last_error

    def _policy_loaded(self, policy: Policy) -> None:
        self.metrics.policy_loaded(policy)
        log_event("policy_loaded", policy_id=policy.policy_id, tiers=sorted(policy.tiers))

    def _policy_failed(self, message: str) -> None:
        self.metrics.policy_reload_failures.inc()
        log_event("policy_rejected", level=30, reason=message)

    def reserve_estimate(self, plan: RoutePlan, request: ParsedRequest, body_bytes: int) -> float:
        """Worst-case USD of a request, reserved against the key's limit before any call.

        Every model of the route may be called (a chain can escalate to its end), each with at most
        ``body_bytes`` prompt tokens (a token is at least one byte of the request's text; the JSON
        around it covers the chat template) and the request's completion cap, or
        ``DEFAULT_COMPLETION_BOUND`` tokens when it sets none. Settling charges the actual cost and
        releases the rest, so over-reserving never overcharges; it only keeps a key from starting
        requests it might not be able to pay for.
        """
        models = plan.route.models if plan.route is not None else [plan.model]
        completion_bound = completion_cap(request.body) or DEFAULT_COMPLETION_BOUND
        return sum(
            self.settings.models[m].price.cost_usd(body_bytes, completion_bound)
            for m in models
            if m in self.settings.models
        )
