"""The Keys page (``/console/keys``): per client key (id and name, never the key), spend against its
limit and period, its rate-limit windows, and the spend over time of the keys that spent most
(gateway.console.aggregates.keys)."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from gateway.console.aggregates.charts import chart_json, spend_chart
from gateway.console.aggregates.keys import CHARTED_KEYS, keys_view
from gateway.console.context import ConsoleContext


def keys_routes(context: ConsoleContext) -> APIRouter:
    """``GET /keys``."""
    router = APIRouter()

    @router.get("/keys", response_class=HTMLResponse)
    async def keys_page(request: Request) -> Response:
        shared = context.gateway.shared
        spend = shared.spend
        view = await keys_view(
            shared.authenticator, spend, shared.redis, shared.keys, spend.window_s, time.time()
        )
        names = {row.key_id: row.name or row.key_id for row in view.keys}
        return context.views.page(
            request,
            "keys.html",
            title="Keys",
            view=view,
            charted=CHARTED_KEYS,
            spend=chart_json(spend_chart(view, names)),
        )

    return router
