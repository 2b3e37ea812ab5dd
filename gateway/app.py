"""The HTTP app (DESIGN section 7): ``create_app(settings)`` builds everything; nothing runs at import.

The two completion endpoints are plain ASGI callables mounted on the FastAPI app: the request
path is measured (DESIGN section 2), so it parses with orjson into a dict and validates by hand,
and skips FastAPI's per-request machinery. Everything else (models, health, metrics, admin) is an
ordinary FastAPI route. Every failure a client sees goes through ``error_parts`` (one mapping of
GatewayError to an OpenAI error body); unexpected exceptions become a 500 OpenAI body without a
traceback, logged server side.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from gateway.cascade import CascadeEngine, CascadeFacts, client_body
from gateway.config import Settings
from gateway.errors import BodyTooLargeError, BudgetExceededError, GatewayError
from gateway.logs import configure_logging, log_event, log_exception
from gateway.metrics import CONTENT_TYPE, GatewayMetrics
from gateway.requests import ParsedRequest, RequestKind, parse_request
from gateway.routing import CASCADE_MODEL, RoutePlan, Router
from gateway.streaming import DONE, SSE_HEADERS, client_chunk, replay, sse, sse_error, upstream_events
from gateway.upstream import UpstreamFailure, UpstreamPool, read_completion
from policies import Policy

_JSON_HEADER = (b"content-type", b"application/json")
_WANTED_HEADERS = frozenset(
    {b"authorization", b"content-length", b"x-cascade-max-cost-usd", b"x-cascade-tier"}
)
_UPSTREAM_PROBE_TIMEOUT_S = 2.0


class InternalError(GatewayError):
    """500: an unexpected failure inside the gateway (details only in the server log)."""

    code = "internal_error"


class _ClientGone(Exception):
    """The client disconnected before its request body arrived."""


def error_parts(
    error: GatewayError, request_id: str | None = None
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The one mapping of a GatewayError to (status, headers, OpenAI error body)."""
    headers = [_JSON_HEADER]
    headers.extend((k.lower().encode(), v.encode()) for k, v in error.headers.items())
    if request_id:
        headers.append((b"x-request-id", request_id.encode()))
    payload = orjson.dumps(error.body())
    return error.status, headers, payload


class Gateway:
    """Everything one app instance owns: settings, metrics, upstream pool, router, engine, shared state."""

    def __init__(self, settings: Settings, rng: random.Random | None = None):
        self.settings = settings
        self.metrics = GatewayMetrics(with_redis=bool(settings.redis_url or settings.policy_is_redis))
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
        if self.shared.authenticator.is_open:
            log_event("auth_open", message="no client API keys configured: the gateway is open to anyone")
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

    def reserve_estimate(self, plan: RoutePlan) -> float:
        """USD to reserve against a key's limit before calling: every stage's calibration mean cost."""
        policy = plan.policy or self.policy
        if policy is None:
            return 0.0
        models = plan.route.models if plan.route is not None else [plan.model]
        return sum(policy.models[m].mean_cost_usd for m in models if m in policy.models)


class _Exchange:
    """One HTTP exchange's send side, remembering whether the response has started."""

    __slots__ = ("done", "gone", "send", "started")

    def __init__(self, send: Any):
        self.send = send
        self.started = False
        self.done = False
        self.gone = False

    async def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.started = True
        await self.send({"type": "http.response.start", "status": status, "headers": headers})

    async def body(self, data: bytes, more: bool = True) -> None:
        if not more:
            self.done = True  # from here on a disconnect is the normal end of the exchange
        await self.send({"type": "http.response.body", "body": data, "more_body": more})


class CompletionsEndpoint:
    """ASGI app for ``POST /v1/chat/completions`` (kind ``chat``) and ``POST /v1/completions``."""

    def __init__(self, gateway: Gateway, kind: RequestKind):
        self.gateway = gateway
        self.kind = kind
        self.path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        gw = self.gateway
        started = time.perf_counter()
        request_id = os.urandom(12).hex()
        exchange = _Exchange(send)
        headers = {k: v for k, v in scope["headers"] if k in _WANTED_HEADERS}
        tier, outcome, status = "none", "error", 200
        facts: CascadeFacts | None = None
        parsed: ParsedRequest | None = None
        reservation = None
        watcher: asyncio.Task[None] | None = None
        try:
            raw = await _read_body(receive, headers.get(b"content-length"), gw.settings.limits.max_body_bytes)
            identity = await gw.shared.authenticator.authenticate(_text(headers.get(b"authorization")))
            parsed = parse_request(raw, self.kind)
            plan = gw.router.plan(
                parsed,
                gw.policy,
                _text(headers.get(b"x-cascade-max-cost-usd")),
                _text(headers.get(b"x-cascade-tier")),
                gw.no_policy_reason(),
            )
            tier = plan.tier
            try:
                reservation = await gw.shared.spend.reserve(identity, gw.reserve_estimate(plan))
            except BudgetExceededError:
                gw.metrics.budget_rejections.inc()
                raise
            # From here on upstream calls may run: cancel them if the client goes away.
            current = asyncio.current_task()
            assert current is not None
            watcher = asyncio.create_task(_watch_disconnect(receive, exchange, current))
            deadline = time.monotonic() + gw.settings.limits.request_timeout_s
            facts = gw.engine.new_facts(plan)
            if parsed.stream:
                await self._stream(exchange, plan, parsed, facts, deadline, request_id, started)
            else:
                result = await gw.engine.run(plan, parsed, deadline, facts=facts)
                body = client_body(result.body, facts.answered_by, parsed)  # type: ignore[arg-type]
                payload = orjson.dumps(body)
                overhead_ms = (time.perf_counter() - started - facts.upstream_s) * 1000
                out = [
                    _JSON_HEADER,
                    (b"content-length", str(len(payload)).encode()),
                    (b"x-request-id", request_id.encode()),
                    *facts.headers(overhead_ms),
                ]
                await exchange.start(200, out)
                await exchange.body(payload, more=False)
            outcome = facts.outcome
        except asyncio.CancelledError:
            if not exchange.gone:
                raise
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
            status, outcome = 499, "error"
        except _ClientGone:
            status, outcome = 499, "error"
        except GatewayError as error:
            status = error.status
            await self._send_error(exchange, error, request_id)
        except Exception:
            log_exception("request_failed", request_id=request_id, route=self.path)
            status = 500
            await self._send_error(
                exchange, InternalError(f"internal error (request {request_id})"), request_id
            )
        finally:
            if watcher is not None:
                watcher.cancel()
        if facts is not None and outcome == "error" and facts.outcome != "error":
            facts.outcome = "error"
        if reservation is not None:
            await gw.shared.spend.settle(reservation, facts.cost_usd if facts else 0.0)
        self._record(request_id, tier, outcome, status, facts, parsed, started)

    async def _stream(
        self,
        exchange: _Exchange,
        plan: RoutePlan,
        parsed: ParsedRequest,
        facts: CascadeFacts,
        deadline: float,
        request_id: str,
        started: float,
    ) -> None:
        """Serve a streamed request: replay a complete answer, or relay the final stage live."""
        gw = self.gateway
        result = await gw.engine.run(plan, parsed, deadline, facts=facts, stream_last=True)
        if result.body is not None:
            await self._replay(exchange, result.body, facts, parsed, request_id, started)
            return
        live = result.live
        assert live is not None
        facts.models_called.append(live.model)
        t0 = time.monotonic()
        try:
            async with gw.pool[live.model].stream(parsed.kind, live.body, deadline) as response:
                facts.answered_by = live.model
                if response.content_type == "application/json":
                    # An upstream that ignores ``stream``: its whole answer, replayed like an accepted one.
                    complete = await read_completion(response, live.model)
                    facts.upstream_s += time.monotonic() - t0
                    gw.engine.account(facts, live.model, complete.get("usage"))
                    await self._replay(exchange, complete, facts, parsed, request_id, started)
                    return
                overhead_ms = (time.perf_counter() - started - facts.upstream_s) * 1000
                await exchange.start(
                    200, [*SSE_HEADERS, (b"x-request-id", request_id.encode()), *facts.headers(overhead_ms)]
                )
                held: dict[str, Any] | None = None
                usage = None
                async for event in upstream_events(response, live.model):
                    if event.get("usage"):
                        usage = event["usage"]
                    if not event.get("choices") and not parsed.include_usage:
                        continue
                    client_chunk(event, live.model, parsed)
                    if held is not None:
                        await exchange.body(sse(held))
                    held = event
                facts.upstream_s += time.monotonic() - t0
                gw.engine.account(facts, live.model, usage)
                if held is None:
                    held = {
                        "object": "chat.completion.chunk" if parsed.kind == "chat" else "text_completion",
                        "model": live.model,
                        "choices": [],
                    }
                overhead_ms = (time.perf_counter() - started - facts.upstream_s) * 1000
                held["cascade"] = facts.as_dict(overhead_ms)
                await exchange.body(sse(held) + DONE, more=False)
                return
        except UpstreamFailure as failure:
            facts.failures.append(failure.kind)
            facts.upstream_s += time.monotonic() - t0
            if exchange.started:
                facts.outcome = "error"
                await exchange.body(sse_error(failure.to_gateway_error()), more=False)
                return
            if live.fallback is None:
                raise failure.to_gateway_error() from None
            facts.answered_by, facts.degraded = live.fallback_model, True
            await self._replay(exchange, live.fallback, facts, parsed, request_id, started)
            return

    async def _replay(
        self,
        exchange: _Exchange,
        body: dict[str, Any],
        facts: CascadeFacts,
        parsed: ParsedRequest,
        request_id: str,
        started: float,
    ) -> None:
        body = client_body(body, facts.answered_by or "", parsed)
        overhead_ms = (time.perf_counter() - started - facts.upstream_s) * 1000
        await exchange.start(
            200, [*SSE_HEADERS, (b"x-request-id", request_id.encode()), *facts.headers(overhead_ms)]
        )
        await exchange.body(replay(body, parsed, facts.as_dict(overhead_ms)), more=False)

    async def _send_error(self, exchange: _Exchange, error: GatewayError, request_id: str) -> None:
        if exchange.done:
            return
        if exchange.started:  # inside a stream: an SSE error event, never a silent truncation
            await exchange.body(sse_error(error), more=False)
            return
        status, headers, payload = error_parts(error, request_id)
        headers.append((b"content-length", str(len(payload)).encode()))
        await exchange.start(status, headers)
        await exchange.body(payload, more=False)

    def _record(
        self,
        request_id: str,
        tier: str,
        outcome: str,
        status: int,
        facts: CascadeFacts | None,
        parsed: ParsedRequest | None,
        started: float,
    ) -> None:
        """Metrics and the request's log line."""
        metrics = self.gateway.metrics
        duration = time.perf_counter() - started
        upstream_s = facts.upstream_s if facts else 0.0
        metrics.child(metrics.requests, tier, outcome).inc()
        metrics.child(metrics.request_duration, tier).observe(duration)
        metrics.overhead.observe(max(0.0, duration - upstream_s))
        fields: dict[str, Any] = {
            "request_id": request_id,
            "path": self.path,
            "status": status,
            "tier": tier,
            "outcome": outcome,
            "duration_ms": round(duration * 1000, 3),
            "overhead_ms": round((duration - upstream_s) * 1000, 3),
        }
        if parsed is not None:
            fields["model"] = parsed.model[:100]
            fields["stream"] = parsed.stream
            if self.gateway.settings.logging.log_prompts:
                fields["prompt"] = parsed.body.get("messages" if parsed.kind == "chat" else "prompt")
        if facts is not None:
            fields.update(
                route=facts.route,
                models_called=facts.models_called,
                answered_by=facts.answered_by,
                escalated=facts.escalated,
                score=facts.score,
                threshold=facts.threshold,
                cost_usd=facts.cost_usd,
                upstream_ms=round(upstream_s * 1000, 3),
                degraded=facts.degraded,
                policy_id=facts.policy_id,
            )
            if facts.failures:
                fields["upstream_failures"] = facts.failures
        log_event("request", **fields)


async def _read_body(receive: Any, content_length: bytes | None, limit: int) -> bytes:
    """The request body, refusing more than ``limit`` bytes (413) before or while reading."""
    if content_length is not None:
        try:
            declared = int(content_length)
        except ValueError:
            declared = 0
        if declared > limit:
            raise BodyTooLargeError(f"request body of {declared} bytes exceeds the limit of {limit} bytes")
    message = await receive()
    if message["type"] == "http.disconnect":
        raise _ClientGone
    body: bytes = message.get("body", b"")
    if not message.get("more_body"):
        if len(body) > limit:
            raise BodyTooLargeError(f"request body exceeds the limit of {limit} bytes")
        return body
    chunks, size = [body], len(body)
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _watch_disconnect(receive: Any, exchange: _Exchange, task: asyncio.Task[Any]) -> None:
    """Cancel the request's task (and with it every upstream call) when the client disconnects."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            if not exchange.done:
                exchange.gone = True
                task.cancel()
            return


def _text(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value is not None else None


class GatewayApp(FastAPI):
    """FastAPI with a fast path: ``POST`` to a completion endpoint goes straight to its ASGI handler.

    The handlers do their own error mapping, so FastAPI's middleware stack (telemetry, exit stack,
    exception middleware, router) would only add per-request cost on the hot path.
    """

    fast_paths: dict[str, CompletionsEndpoint]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = self.fast_paths.get(scope["path"])
            if endpoint is not None:
                await endpoint(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def create_app(settings: Settings, *, rng: random.Random | None = None) -> FastAPI:
    """Build the gateway app for ``settings`` (upstream sessions and state start in its lifespan).

    ``rng`` draws among randomized-mixture routes (seed it for reproducible tests).
    """
    gateway = Gateway(settings, rng)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from gateway.admin import admin_router

        await gateway.start()
        app.include_router(admin_router(gateway.shared))
        try:
            yield
        finally:
            await gateway.close()

    app = GatewayApp(
        title="cascade gateway", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.gateway = gateway
    app.fast_paths = {
        "/v1/chat/completions": CompletionsEndpoint(gateway, "chat"),
        "/v1/completions": CompletionsEndpoint(gateway, "completions"),
    }
    for path, endpoint in app.fast_paths.items():  # also routed normally (405 on other methods)
        app.router.routes.append(Route(path, endpoint, methods=["POST"]))

    @app.get("/v1/models")
    async def list_models(request: Request) -> Response:
        await gateway.shared.authenticator.authenticate(request.headers.get("authorization"))
        policy = gateway.policy
        names = [CASCADE_MODEL]
        if policy is not None:
            names += [f"{CASCADE_MODEL}/{tier}" for tier in policy.tiers]
        names += list(settings.models)
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "cascade"} for name in names]
        return _json({"object": "list", "data": data})

    @app.get("/healthz")
    async def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> Response:
        state = await gateway.shared.readiness()
        upstreams = await _probe_upstreams(gateway)
        if gateway.metrics.redis_up is not None and state.get("redis") is not None:
            gateway.metrics.redis_up.set(1 if state["redis"] else 0)
        # Redis being down does not make a replica unready: it keeps serving the last good policy.
        ready = bool(state.get("policy")) and all(upstreams.values())
        return _json({"ready": ready, **state, "upstreams": upstreams}, status=200 if ready else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        if gateway.metrics.redis_up is not None and gateway.shared is not None:
            gateway.metrics.redis_up.set(1 if gateway.shared.redis_up else 0)
        return Response(gateway.metrics.render(), media_type=CONTENT_TYPE)

    @app.exception_handler(GatewayError)
    async def gateway_error(request: Request, error: GatewayError) -> Response:
        status, headers, payload = error_parts(error)
        return Response(payload, status_code=status, headers={k.decode(): v.decode() for k, v in headers})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> Response:
        wrapped = GatewayError(str(error.detail), code="not_found" if error.status_code == 404 else None)
        wrapped.status = error.status_code
        wrapped.type = "invalid_request_error"
        return await gateway_error(request, wrapped)

    @app.exception_handler(Exception)
    async def unexpected_error(request: Request, error: Exception) -> Response:
        log_exception("request_failed", route=request.url.path)
        return await gateway_error(request, InternalError("internal error"))

    return app


def _json(document: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(document), status_code=status, media_type="application/json")


async def _probe_upstreams(gateway: Gateway) -> dict[str, bool]:
    """Whether each upstream answers HTTP at all (any status) within a short timeout."""
    import aiohttp

    async def probe(name: str) -> tuple[str, bool]:
        client = gateway.pool[name]
        try:
            async with client.session.get(
                client.config.base_url + "/models",
                timeout=aiohttp.ClientTimeout(total=_UPSTREAM_PROBE_TIMEOUT_S),
                headers=client.auth_headers,
            ) as response:
                await response.read()
                return name, True
        except (aiohttp.ClientError, TimeoutError):
            return name, False

    return dict(await asyncio.gather(*(probe(name) for name in gateway.settings.models)))
