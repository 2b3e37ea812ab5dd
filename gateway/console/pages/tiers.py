"""The Tiers page (``/console/tiers``): per tier, what the policy promised held out against what the
whole deployment delivers live, each tier's bounds with the live figures against them, the envelope
with each tier's point, the live score histograms with their thresholds and the score drift
(gateway.console.aggregates.tiers)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from gateway.console.aggregates.charts import chart_json, envelope_chart, histogram_chart
from gateway.console.aggregates.deployment import deployment_now
from gateway.console.aggregates.policy import last_recalibration
from gateway.console.aggregates.tiers import BOUNDS_MIN_SERVED, tiers_view
from gateway.console.context import ConsoleContext


def tiers_routes(context: ConsoleContext) -> APIRouter:
    """``GET /tiers``."""
    router = APIRouter()

    @router.get("/tiers", response_class=HTMLResponse)
    async def tiers_page(request: Request) -> Response:
        gateway = context.gateway
        deployment = await deployment_now(gateway.feed, gateway.metrics)
        report = await last_recalibration(gateway.shared.redis, gateway.shared.keys)
        view = tiers_view(deployment, gateway.policy, report)
        histograms = {
            (tier.name, h.model): chart_json(histogram_chart(h))
            for tier in view.tiers
            for h in tier.histograms
        }
        return context.views.page(
            request,
            "tiers.html",
            title="Tiers",
            view=view,
            envelope=chart_json(envelope_chart(view)),
            histograms=histograms,
            bounds_min_served=BOUNDS_MIN_SERVED,
        )

    return router
