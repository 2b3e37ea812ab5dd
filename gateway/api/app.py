"""The HTTP app: ``create_app(settings)`` builds everything; nothing runs at import.

``build_gateway`` is the one place that reads ``Settings``: every component gets only the config
sections (or plain values) it uses.

The surface it serves is docs/contracts.md#http-surface.

The API endpoints (gateway.api.endpoint, one per edge of gateway.api.edges) are plain ASGI callables
that ``GatewayApp`` dispatches to before FastAPI's middleware stack; everything else (models,
health, metrics, admin) is an ordinary FastAPI route, with the same OpenAI error mapping
(``error_parts``).
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from gateway.api.admin import admin_router
from gateway.api.edges.base import ApiEdge, OpenAIEdge
from gateway.api.edges.messages import COUNT_TOKENS_PATH, COUNT_TOKENS_REFUSAL, MessagesEdge
from gateway.api.edges.responses import ResponsesEdge
from gateway.api.endpoint import ApiEndpoint, error_parts
from gateway.api.usage import usage_router
from gateway.assembly.runtime import Gateway, StateEvents, build_traffic_sampler
from gateway.assembly.state import build_shared_state
from gateway.config.settings import Settings
from gateway.routing.tier_choice import CASCADE_MODEL
from gateway.telemetry.metrics import CONTENT_TYPE, GatewayMetrics
from gateway.upstream.transport import SessionOpener, open_pooled_session
from gateway.wire.errors import GatewayError, InternalError, NotServedError
from gateway.wire.logs import log_exception
from redaction import Redactor

__all__ = ["Gateway", "GatewayApp", "build_gateway", "create_app", "error_parts"]


class GatewayApp(FastAPI):
    """FastAPI with a fast path: ``POST`` to a completion endpoint goes straight to its ASGI handler.

    The handlers do their own error mapping, so FastAPI's middleware stack (telemetry, exit stack,
    exception middleware, router) would only add per-request cost on the hot path.
    """

    fast_paths: dict[str, ApiEndpoint]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = self.fast_paths.get(scope["path"])
            if endpoint is not None:
                await endpoint(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def build_gateway(
    settings: Settings, rng: random.Random | None = None, transport: SessionOpener = open_pooled_session
) -> Gateway:
    """The app's ``Gateway`` for ``settings``, each component given only the sections it uses.

    No I/O: Redis clients connect on first use, upstream sessions open in ``Gateway.start()``
    (with ``transport``: gateway.upstream.transport).
    """
    metrics = GatewayMetrics(
        with_redis=bool(settings.redis_url or settings.policy_is_redis),
        with_learning=settings.learning.enabled,
        drift=settings.drift,
    )
    events = StateEvents(metrics)
    shared = build_shared_state(
        policy=settings.policy,
        redis_url=settings.redis_url,
        redis_timeout_s=settings.redis_timeout_s,
        auth=settings.auth,
        budgets=settings.budgets,
        known_models=list(settings.models),
        capabilities=settings.model_capabilities(),
        on_policy_loaded=events.policy_loaded,
        on_policy_failure=events.policy_failed,
        on_spend_fallback=events.spend_fallback,
        on_rate_limited=events.rate_limited,
        on_limits_degraded=events.limits_degraded,
        on_auth_failure=events.auth_failed,
        trusted_proxies=settings.trusted_proxies,
    )
    # The traffic sampler, only when enabled: its stores and judges are imported only then.
    # Every secret the config refers to: kept out of any upstream text the gateway relays or logs.
    redact = Redactor(settings.secret_values())
    learning = build_traffic_sampler(
        settings.learning,
        settings.models,
        settings.limits.request_timeout_s,
        metrics,
        redact=redact,
        transport=transport,
    )
    return Gateway(
        models=settings.models,
        limits=settings.limits,
        logs=settings.logging,
        metrics=metrics,
        shared=shared,
        learning=learning,
        rng=rng,
        redact=redact,
        coverage=settings.coverage,
        transport=transport,
        upstream_errors=settings.upstream_errors,
        console=settings.console,
    )


def api_edges() -> list[ApiEdge[Any]]:
    """Every API the gateway serves through the cascade, one edge each (gateway.api.edges)."""
    return [
        OpenAIEdge("chat"),
        OpenAIEdge("completions"),
        ResponsesEdge(),
        MessagesEdge(),
    ]


def create_app(
    settings: Settings, *, rng: random.Random | None = None, transport: SessionOpener = open_pooled_session
) -> FastAPI:
    """Build the gateway app for ``settings`` (upstream sessions and state start in its lifespan).

    ``rng`` draws among randomized-mixture routes (seed it for reproducible tests); ``transport``
    opens the upstream sessions (gateway.upstream.transport: by default pooled TCP connections).
    """
    gateway = build_gateway(settings, rng, transport)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await gateway.start()
        try:
            yield
        finally:
            await gateway.close()

    app = GatewayApp(
        title="cascade gateway", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.gateway = gateway
    app.include_router(admin_router(gateway.shared))
    app.include_router(usage_router(gateway.shared, settings.budgets.window_s))
    app.fast_paths = {edge.path: ApiEndpoint(gateway, edge) for edge in api_edges()}
    for path, endpoint in app.fast_paths.items():  # also routed normally (405 on other methods)
        app.router.routes.append(Route(path, endpoint, methods=["POST"]))

    _add_info_routes(app, gateway)
    _add_error_handlers(app)
    if gateway.console is not None:  # console.enabled: the /console pages (gateway.console)
        from gateway.console.mount import mount_console

        mount_console(app, gateway, settings.auth.admin_key_env)
    return app


def _add_info_routes(app: FastAPI, gateway: Gateway) -> None:
    """/v1/models, the refused count_tokens, /healthz, /readyz and /metrics."""

    @app.get("/v1/models")
    async def list_models(request: Request) -> Response:
        await gateway.shared.authenticator.authenticate(request.headers.get("authorization"), request.scope)
        policy = gateway.policy
        names = [CASCADE_MODEL]
        if policy is not None:
            names += [f"{CASCADE_MODEL}/{tier}" for tier in policy.tiers]
        names += list(gateway.models)
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "cascade"} for name in names]
        return _json({"object": "list", "data": data})

    @app.post(COUNT_TOKENS_PATH)
    async def count_tokens(request: Request) -> Response:
        # Refused in the Anthropic error shape (Claude Code does not call it; docs/apis.md).
        error = NotServedError(COUNT_TOKENS_REFUSAL)
        status, headers, payload = MessagesEdge().error_parts(error)
        return Response(payload, status_code=status, headers={k.decode(): v.decode() for k, v in headers})

    @app.get("/healthz")
    async def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    async def readyz(request: Request) -> Response:
        # "Can this replica serve?": a policy is loaded, and a minilm-v1 router's embedding workers
        # finished their boot warm-up (their later restarts serve the documented fallback meanwhile).
        # Redis down is served by the documented fallback and upstream health is a metric
        # (gateway.upstream.health), so neither makes it unready.
        embeddings = gateway.router_runtime.embeddings
        ready = gateway.policy is not None and not embeddings.booting
        document: dict[str, Any] = {"ready": ready}
        if gateway.shared.authenticator.is_admin(request.headers.get("authorization")):
            document.update(gateway.shared.readiness())
            document.update(gateway.health.status())
            document["embeddings"] = embeddings.status()
        return _json(document, status=200 if ready else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        if gateway.metrics.redis_up is not None:
            gateway.metrics.redis_up.set(1 if gateway.shared.redis_up else 0)
        return Response(gateway.metrics.render(), media_type=CONTENT_TYPE)


def _add_error_handlers(app: FastAPI) -> None:
    """Every error a route raises answered as an OpenAI error body (a 500 without traceback, logged)."""

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


def _json(document: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(document), status_code=status, media_type="application/json")
