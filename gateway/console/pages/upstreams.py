"""The Upstreams page (``/console/upstreams``): per configured model, attempts, failures by kind,
latency quantiles and breaker state across the deployment; time to first token per tier
(gateway.console.aggregates.upstreams)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from gateway.console.aggregates.deployment import deployment_now
from gateway.console.aggregates.upstreams import QUANTILES, upstreams_view
from gateway.console.context import ConsoleContext


def upstreams_routes(context: ConsoleContext) -> APIRouter:
    """``GET /upstreams``."""
    router = APIRouter()

    @router.get("/upstreams", response_class=HTMLResponse)
    async def upstreams_page(request: Request) -> Response:
        gateway = context.gateway
        deployment = await deployment_now(gateway.feed, gateway.metrics)
        view = await upstreams_view(deployment, gateway.models, gateway.shared.redis, gateway.shared.keys)
        return context.views.page(
            request, "upstreams.html", title="Upstreams", view=view, quantiles=QUANTILES
        )

    return router
