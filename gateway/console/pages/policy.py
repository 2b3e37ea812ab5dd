"""The Policy and learning page (``/console/policy``): the served policy (id, when it was loaded, its
tiers and routes, which replicas serve it), the last recalibration's held-out comparison and whether
it was pushed, and the sampled traffic and its labels (gateway.console.aggregates.policy)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from gateway.console.aggregates.deployment import deployment_now
from gateway.console.aggregates.policy import last_recalibration, policy_view
from gateway.console.context import ConsoleContext


def policy_routes(context: ConsoleContext) -> APIRouter:
    """``GET /policy``."""
    router = APIRouter()

    @router.get("/policy", response_class=HTMLResponse)
    async def policy_page(request: Request) -> Response:
        gateway = context.gateway
        deployment = await deployment_now(gateway.feed, gateway.metrics)
        report = await last_recalibration(gateway.shared.redis, gateway.shared.keys)
        status = gateway.shared.policy_store.status()
        view = policy_view(gateway.policy, status, deployment, report)
        return context.views.page(request, "policy.html", title="Policy and learning", view=view)

    return router
