"""What one gateway app owns: its config sections, metrics, upstream pool, router, cascade engine,
shared state, and the traffic sampler when ``learning.enabled`` (gateway.learning).

``gateway.api.app.build_gateway`` builds it from the settings (no I/O: Redis clients and the traffic
store connect on first use); ``start()`` opens sessions and loads the policy, ``close()`` releases
them (the sampler gets what is left of the shutdown grace to finish its queue).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from gateway.assembly.replica_feed import console_feed
from gateway.assembly.state import SharedState
from gateway.config.console import ConsoleConfig
from gateway.config.coverage import CoverageConfig
from gateway.config.learning import LearningConfig
from gateway.config.settings import (
    ConfigError,
    LimitsConfig,
    LoggingConfig,
    ModelConfig,
    UpstreamErrorsConfig,
)
from gateway.config.shift_alarm_share import SharedShiftAlarms
from gateway.engine.cascade import CascadeEngine, scored_stage_body
from gateway.records.recorder import RequestRecorder, build_recorder
from gateway.routing.routed_tiers import RouterRuntime
from gateway.routing.safe_routes import SafeRoutes
from gateway.routing.tier_choice import RoutePlan, RoutePlanner
from gateway.stages.blackbox_scoring import reserve_scoring_usd
from gateway.telemetry.metrics import GatewayMetrics
from gateway.upstream.breaker import Breakers
from gateway.upstream.breaker_share import SharedBreakers
from gateway.upstream.health import UpstreamHealth
from gateway.upstream.pool import UpstreamPool
from gateway.upstream.transport import SessionOpener, open_pooled_session
from gateway.wire.errors import UnsupportedInputError
from gateway.wire.logs import configure_logging, log_event
from gateway.wire.requests import ParsedRequest
from money.charges import (
    CHAT_PARTS,
    SENT_FIELDS_BYTES,
    UNPRICED,
    CallLimits,
    bound_usd,
    generated_choices,
    output_cap,
    part_counts,
    part_tokens_bound,
    prompt_count,
    prompt_tokens_bound,
    sending_tokens_bound,
    unpriced_part,
)
from policies import Policy
from policies.request_defaults import merge_request_defaults
from redaction import Redactor

if TYPE_CHECKING:
    from gateway.learning.sampler import TrafficSampler
    from gateway.telemetry.otel_spans import Tracing

# How long closing waits for requests that are still settling (cut by the drain, or cancelled).
_CLOSE_WAIT_S = 5.0


class StateEvents:
    """What the shared state reports (its ``on_*`` hooks), as metrics and log lines."""

    def __init__(self, metrics: GatewayMetrics):
        self._metrics = metrics

    def policy_loaded(self, policy: Policy) -> None:
        """A policy was loaded and is served from now on."""
        self._metrics.policy_loaded(policy)
        log_event("policy_loaded", policy_id=policy.policy_id, tiers=sorted(policy.tiers))

    def policy_failed(self, message: str) -> None:
        """A policy load was rejected (the last good one is kept)."""
        self._metrics.policy_reload_failures.inc()
        log_event("policy_rejected", level=30, reason=message)

    def spend_fallback(self, reason: str) -> None:
        """A keyed request's spend could not be checked in Redis (``reason``)."""
        self._metrics.child(self._metrics.spend_fallbacks, reason).inc()

    def limits_degraded(self, degraded: bool) -> None:
        """The replica entered (True) or left degraded mode (gateway.keys.outage; it logs both)."""
        self._metrics.limits_degraded.set(1 if degraded else 0)
        if degraded:
            self._metrics.limits_degraded_entered.inc()

    def rate_limited(self, limit: str) -> None:
        """A keyed request was refused by its ``limit`` (requests or tokens) rate limit."""
        self._metrics.child(self._metrics.rate_limit_rejections, limit).inc()

    def auth_failed(self, reason: str, client: str | None) -> None:
        """A client key was refused (``reason``: missing or unknown); never given the key itself."""
        self._metrics.child(self._metrics.auth_failures, reason).inc()
        log_event("auth_failed", level=logging.WARNING, reason=reason, client=client)


def _shared_shift_alarms(metrics: GatewayMetrics, shared: SharedState) -> SharedShiftAlarms | None:
    """The shift alarms' Redis side, read on the state's once-a-second loop; None without Redis."""
    if shared.redis is None:
        return None
    share = SharedShiftAlarms(metrics.shift_alarms, shared.redis, shared.keys)
    shared.ticks.append(share.refresh)
    return share


class Gateway:
    """Everything one app instance owns: config sections, metrics, upstream pool, router, engine,
    shared state, traffic sampler.

    ``models``, ``limits`` and ``logs`` are the config's ``models``, ``limits`` and ``logging``;
    ``metrics`` are the app's (``shared`` reports into them through ``StateEvents``); ``learning``
    is the traffic sampler (``build_traffic_sampler``), None unless ``learning.enabled``; ``redact`` cleans
    upstream error text of every configured secret (``Settings.secret_values``); ``coverage`` is
    the config's ``coverage`` section (gateway.config.coverage), None when absent; ``transport``
    opens the upstream sessions (gateway.upstream.transport); ``upstream_errors`` says what a
    provider's content-policy refusal does at a stage (the engine's); ``console`` is the config's
    ``console`` section (gateway.config.console: the request records, off by default).
    """

    def __init__(
        self,
        *,
        models: Mapping[str, ModelConfig],
        limits: LimitsConfig,
        logs: LoggingConfig,
        metrics: GatewayMetrics,
        shared: SharedState,
        learning: TrafficSampler | None = None,
        rng: random.Random | None = None,
        redact: Redactor | None = None,
        coverage: CoverageConfig | None = None,
        transport: SessionOpener = open_pooled_session,
        upstream_errors: UpstreamErrorsConfig | None = None,
        tracing: Tracing | None = None,
        console: ConsoleConfig | None = None,
    ):
        """``tracing``: the request and attempt spans' exporter (gateway.telemetry.tracing), None: off."""
        self.models = models
        self.tracing = tracing
        self.limits = limits
        self.logs = logs
        self.metrics = metrics
        self.breakers = Breakers({name: model.breaker for name, model in models.items()}, metrics)
        share = None
        if shared.redis is not None:
            share = SharedBreakers(self.breakers, shared.redis, shared.keys)
            shared.ticks.append(share.refresh)  # the state's once-a-second Redis loop reads it
        self.pool = UpstreamPool(models, self.metrics, redact, transport, self.breakers, share)
        # Shift alarms (gateway.config.shift_alarm): their safe routes, and their Redis side.
        self.safe_routes = SafeRoutes(metrics.shift_alarms)
        self.shift_share = _shared_shift_alarms(metrics, shared)
        self.planner = RoutePlanner(models, rng, coverage)
        content_policy = (upstream_errors or UpstreamErrorsConfig()).content_policy
        self.engine = CascadeEngine(models, self.pool, self.metrics, content_policy)
        self.router_runtime = RouterRuntime(self.metrics)
        if learning is not None:  # sampled requests of a policy with a router carry its features
            learning.runner.featurize = self.router_runtime.features
        self.health = UpstreamHealth(self.pool, self.metrics)
        self.shared = shared
        # This replica's console snapshot (gateway.assembly.replica_feed): with Redis and the console on.
        on = console is not None and console.enabled
        self.feed = console_feed(metrics, shared, on, lambda: self.policy.policy_id if self.policy else None)
        self.metrics.spend_unsynced.set_function(self.shared.spend.unsynced_usd)
        self.metrics.replicas_live.set_function(self.shared.spend.live_replicas)
        self.learning = learning
        # The console's recorder (gateway.records), None when the console is off.
        self.console: RequestRecorder | None = build_recorder(
            console or ConsoleConfig(), redact or Redactor(), shared.request_path, shared.redis, shared.keys
        )
        self.loop: asyncio.AbstractEventLoop | None = None  # the serving loop, once started
        # Completion requests being served (their tasks), for the shutdown drain.
        self.in_flight: set[asyncio.Task[Any]] = set()
        self.draining = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._drain_task: asyncio.Task[None] | None = None
        self._drain_started: float | None = None

    async def start(self) -> None:
        """Open upstream sessions and start the shared state (initial policy load, watchers)."""
        configure_logging(self.logs.level)
        self.loop = asyncio.get_running_loop()
        await self.pool.start()
        if self.learning is not None:
            await self.learning.start()
        self.health.start()
        await self.shared.start()
        policy = self.policy
        routers = [policy.router, *(s.router for s in (policy.kinds or {}).values())] if policy else []
        if any(router is not None and router.features == "minilm-v1" for router in routers):
            self.router_runtime.embeddings.start()  # warmed in the background; /readyz waits for it
        log_event(
            "gateway_started",
            models=sorted(self.models),
            policy_id=policy.policy_id if policy else None,
        )

    def track(self, task: asyncio.Task[Any]) -> None:
        """Count ``task`` (one completion request) as in flight until ``untrack``."""
        self.in_flight.add(task)
        self._idle.clear()

    def untrack(self, task: asyncio.Task[Any]) -> None:
        """The request is done (answered, failed or cut, and its spend settled)."""
        self.in_flight.discard(task)
        if not self.in_flight:
            self._idle.set()

    def begin_drain(self) -> None:
        """Start the shutdown drain (the server has stopped accepting connections).

        In-flight requests get ``limits.shutdown_grace_s`` seconds to finish; the ones still open
        then are cancelled with ``draining`` set, which the endpoint turns into an error for the
        client (an SSE ``error`` event inside a stream), a settled spend, a log line and
        ``cascade_shutdown_interrupted_requests_total``.
        """
        if self._drain_task is not None:
            return
        self.draining = True
        self._drain_started = time.monotonic()
        grace = self.limits.shutdown_grace_s
        log_event("shutdown_draining", in_flight=len(self.in_flight), grace_s=grace)
        self._drain_task = asyncio.get_running_loop().create_task(self._cut_after(grace), name="drain")

    async def _cut_after(self, grace_s: float) -> None:
        try:
            await asyncio.wait_for(self._idle.wait(), timeout=grace_s)
        except TimeoutError:
            log_event("shutdown_grace_over", level=logging.WARNING, interrupting=len(self.in_flight))
            for task in list(self.in_flight):
                task.cancel("gateway shutting down")
            return
        log_event("shutdown_drained")

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until no request is in flight; whether that happened."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout=timeout_s)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """Let interrupted requests settle their spend, finish or drop the queued samples within the
        shutdown grace, then stop watchers, close Redis and upstreams."""
        await self.wait_idle(_CLOSE_WAIT_S)
        if self._drain_task is not None:
            self._drain_task.cancel()
        if self.learning is not None:
            started = self._drain_started if self._drain_started is not None else time.monotonic()
            await self.learning.close(started + self.limits.shutdown_grace_s)
        await self.health.close()
        await self.shared.close()
        await self.pool.close()
        self.router_runtime.close()
        if self.tracing is not None:  # export the spans still queued (a blocking flush: in a thread)
            await asyncio.to_thread(self.tracing.shutdown)

    @property
    def policy(self) -> Policy | None:
        """The policy being served now (None until one loads)."""
        return self.shared.policy_store.current

    def no_policy_reason(self) -> str | None:
        """Why no policy is served (the store's last load error), when none is."""
        if self.shared.policy_store.current is not None:
            return None
        return self.shared.policy_store.last_error

    def reserve_estimate(self, plan: RoutePlan, request: ParsedRequest, body_bytes: int) -> float:
        """Worst-case USD of a request, reserved against the key's limit before any call.

        ``request`` is a parsed chat or legacy completions request and ``body_bytes`` the size of
        the client's body. Every model of the route may be called (a chain can escalate to its
        end), each as ``money.charges.call_bound`` prices a call: the client's fields over the
        model's request defaults (which may set the cap the client left out), at most
        ``body_bytes`` prompt tokens plus what the defaults add to the prompt and what the gateway
        adds to the request it sends (``SENT_FIELDS_BYTES`` and the upstream model id) plus the model's
        declared bound of each image, audio or file part, and the completion cap the call is sent
        with (``money.charges.with_output_cap``: the largest the client or the defaults set,
        else the model's ``default_max_tokens``) for every generated choice of every prompt; with
        a black-box scorer, the extra calls of every scored stage too
        (``gateway.stages.blackbox_scoring``). UnsupportedInputError (400) when the request carries a
        content part of a type no price is known for (``money.charges.CHAT_PARTS``), or one of a
        kind a model of the route declares no bound for. Settling charges the actual
        cost and releases the rest, so over-reserving never overcharges; it only keeps a key from
        starting requests it might not be able to pay for.
        """
        return self.reserve_bounds(plan, request, body_bytes)[0]

    def reserve_tokens(self, plan: RoutePlan, request: ParsedRequest, body_bytes: int) -> int:
        """Worst-case tokens (prompt + completion) of a request's route, counted against a key's
        token rate limits at admission: every model of the route called, each bounded exactly as
        ``reserve_estimate`` bounds it."""
        parts = part_counts(request.body)
        route = self._route_tokens(plan, request, body_bytes, parts)
        return sum(sum(tokens) * model.billed_attempts for model, tokens in route)

    def reserve_bounds(self, plan: RoutePlan, request: ParsedRequest, body_bytes: int) -> tuple[float, int]:
        """(``reserve_estimate``, ``reserve_tokens``) of a request in one pass over its route: what a
        key with a token rate limit reserves (the same values, the same refusals)."""
        parts = part_counts(request.body)  # {} for a request of text only: nothing to check
        if parts and UNPRICED in parts:
            raise _unpriced(request.body)
        total, tokens = 0.0, 0
        for model, bound in self._route_tokens(plan, request, body_bytes, parts):
            total += bound_usd(model.price, *bound) * model.billed_attempts
            tokens += sum(bound) * model.billed_attempts
        return total + self._scoring_bound_usd(plan, request, parts), tokens

    def _route_tokens(
        self, plan: RoutePlan, request: ParsedRequest, body_bytes: int, parts: dict[str, int]
    ) -> Iterator[tuple[ModelConfig, tuple[int, int]]]:
        """(model, (prompt, completion) token bound) of every model of the route, as
        ``reserve_estimate`` describes; UnsupportedInputError (400) for a priced part a model cannot
        bound."""
        models = plan.route.models if plan.route is not None else [plan.model]
        body = request.body
        # The client's body as it is (no defaults): prompt bytes, largest cap, choices x prompts.
        plain: tuple[int, int, int] | None = None
        for name in models:
            model = self.models.get(name) if name is not None else None
            if model is None:
                continue
            limits = model.limits
            if parts:
                _check_parts(model.model if name is None else name, parts, limits)
            defaults = model.request_defaults
            # The request as sent: the fields the gateway adds count like the client's own.
            added = len(model.model) + SENT_FIELDS_BYTES
            if defaults is None:
                if plain is None:
                    plain = (
                        prompt_tokens_bound(body, body_bytes),
                        output_cap(body, 0),
                        generated_choices(body) * prompt_count(body),
                    )
                prompt, cap, completions = plain
                prompt += added + (part_tokens_bound(body, limits) if parts else 0)
                yield model, (prompt, (cap or limits.default_cap) * completions)
            else:
                merged = merge_request_defaults(body, defaults, chat=request.api == "chat")
                sent_bytes = body_bytes + added + defaults.prompt_bytes()
                yield model, sending_tokens_bound(merged, sent_bytes, limits)

    def _scoring_bound_usd(self, plan: RoutePlan, request: ParsedRequest, parts: dict[str, int]) -> float:
        """Worst-case USD of a black-box scorer's extra calls on every scored stage of the route
        (gateway.stages.blackbox_scoring); 0 for a logprob scorer. A scorer's own model (the verifier's)
        is sent the stage's messages: it must bound their priced parts too."""
        if plan.route is None or plan.policy is None or not plan.policy.scorer.is_blackbox:
            return 0.0
        scorer = plan.policy.scorer
        own = scorer.own_model
        if parts and own is not None and own in self.models:
            _check_parts(own, parts, self.models[own].limits)
        stages = [
            (name, scored_stage_body(request, self.models[name], scorer))
            for name in plan.route.models[:-1]
            if name in self.models
        ]
        return reserve_scoring_usd(scorer, self.models, stages, request)


def _check_parts(name: str, parts: Mapping[str, int], limits: CallLimits) -> None:
    """UnsupportedInputError (400) when model ``name`` declares no bound for a kind of priced content
    part the request carries: what it would be billed for the part could not be reserved."""
    for kind in parts:
        if kind not in limits.part_tokens:
            raise UnsupportedInputError(
                f"model {name!r} does not take {kind} input here: its gateway config declares no "
                f"token bound for {kind} parts (models.{name}.part_tokens.{kind})",
                param="messages",
            )


_FORWARDED = ", ".join(CHAT_PARTS)


def _unpriced(body: dict[str, Any]) -> UnsupportedInputError:
    """The refusal of a chat body carrying a content part of a type no price is known for."""
    where, part_type = unpriced_part(body) or ("messages", "(unknown)")
    return UnsupportedInputError(
        f"'{where}': content parts of type {part_type!r} are not taken by this gateway: it forwards "
        f"only parts it can price ({_FORWARDED}; docs/apis.md#content-parts)",
        param=where,
    )


def build_traffic_sampler(
    learning: LearningConfig,
    models: Mapping[str, ModelConfig],
    request_timeout_s: float,
    metrics: GatewayMetrics,
    *,
    redact: Redactor | None = None,
    transport: SessionOpener = open_pooled_session,
) -> TrafficSampler | None:
    """The traffic sampler when ``learning.enabled``, else None; ConfigError naming the extra this
    install lacks for the configured store or judge.

    ``learning``, ``models`` and ``request_timeout_s`` are the config's ``learning``, ``models`` and
    ``limits.request_timeout_s`` (the bound of the sampler's shadow calls); ``transport`` opens
    the sessions of its shadow calls.
    """
    if not learning.enabled:
        return None
    from gateway.config.learning import missing_requirement

    problem = missing_requirement(learning)
    if problem is not None:
        raise ConfigError(f"learning: {problem}")
    from gateway.learning.sampler import TrafficSampler

    return TrafficSampler(learning, models, request_timeout_s, metrics, redact=redact, transport=transport)
