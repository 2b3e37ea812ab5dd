"""The Requests pages: the recent requests (newest first, filtered, paged) and one request as the
gateway decided it (``/console/requests/<x-request-id>``).

The list reads one page of the record store (gateway.records.store: at most its scan budget of
records, so a rare filter still answers fast and says where it stopped); htmx swaps the table when a
filter changes, and the same form is a plain GET without JavaScript. The request page reads one
record by id (an index lookup, never a scan).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from gateway.console.context import ConsoleContext
from gateway.console.views import wants_part
from gateway.records.record import NO_REASON
from gateway.records.store import RecordFilter
from gateway.stages.answer_review import EscalationReason

OUTCOMES = ("accepted", "escalated", "direct", "passthrough", "error")
PAGE_SIZES = (25, 50, 100, 200)


def requests_routes(context: ConsoleContext) -> APIRouter:
    """``GET /requests`` and ``GET /requests/{request_id}`` over ``context``'s records."""
    router = APIRouter()
    views, records = context.views, context.records

    @router.get("/requests", response_class=HTMLResponse)
    async def request_list(
        request: Request,
        tier: str = "",
        key: str = "",
        outcome: str = "",
        reason: str = "",
        cursor: str = "",
        limit: int = 50,
    ) -> Response:
        where = RecordFilter(
            tier=tier.strip() or None,
            key_id=key.strip() or None,
            outcome=outcome.strip() or None,
            reason=reason.strip() or None,
        )
        size = limit if limit in PAGE_SIZES else 50
        page = await records.page(where, cursor.strip() or None, size)
        values: dict[str, Any] = {
            "page": page,
            "where": where,
            "size": size,
            "cursor": cursor.strip(),
            "query": _query(where, size),
            "chart": _chart(page.records),
        }
        if wants_part(request):
            return views.part("requests_rows.html", **values)
        policy = context.gateway.policy
        return views.page(
            request,
            "requests.html",
            title="Requests",
            tiers=sorted(policy.tiers) if policy is not None else [],
            outcomes=OUTCOMES,
            reasons=[str(reason) for reason in EscalationReason] + [NO_REASON],
            page_sizes=PAGE_SIZES,
            kept=await records.count(),
            store=records,
            **values,
        )

    @router.get("/requests/{request_id}", response_class=HTMLResponse)
    async def request_page(request: Request, request_id: str) -> Response:
        record = await records.get(request_id[:64]) if request_id.isalnum() else None
        if record is None:
            return views.page(
                request, "request_missing.html", title="Request not found", status=404, request_id=request_id
            )
        return views.page(request, "request.html", title=f"Request {request_id}", record=record)

    return router


def _query(where: RecordFilter, size: int) -> str:
    """The list's filters as a query string (the pager's links keep them)."""
    pairs = [
        ("tier", where.tier),
        ("key", where.key_id),
        ("outcome", where.outcome),
        ("reason", where.reason),
        ("limit", str(size)),
    ]
    return urlencode([(name, value) for name, value in pairs if value])


def _chart(records: list[dict[str, Any]]) -> str:
    """The chart's data as JSON: the listed requests' times, durations (ms) and costs (USD), oldest
    first (uPlot's x axis must increase)."""
    rows = sorted(records, key=lambda record: record.get("time") or 0)
    data = [
        [record.get("time") or 0 for record in rows],
        [record.get("duration_ms") or 0 for record in rows],
        [(record.get("charge") or {}).get("cost_usd") or 0 for record in rows],
    ]
    return orjson.dumps(data).decode()
