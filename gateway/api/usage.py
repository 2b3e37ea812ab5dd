"""``GET /v1/me/usage``: a key holder's own spend, limit, budget period and rate-limit state.

The caller is identified by its key alone (``Authorization: Bearer <key>``, or ``x-api-key`` as
the Anthropic clients send it); nothing in the request can name another key, so no key ever sees
another's usage. An unknown key is a 401 like on every endpoint; on an open gateway (no key) the
answer says the caller is not metered. Not on the hot path: one read-only Redis pipeline.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response

from gateway.assembly.state import SharedState
from gateway.keys.auth import ClientIdentity
from gateway.keys.budget_periods import NEVER
from gateway.keys.ledger import NANO_PER_USD, KeyUsage
from gateway.keys.rate_limits import duration
from gateway.keys.spend import SpendLimiter

USAGE_PATH = "/v1/me/usage"


def usage_router(shared: SharedState, window_s: int) -> APIRouter:
    """The ``/v1/me/usage`` route over the app's shared state (``window_s``: ``budgets.window_s``)."""
    router = APIRouter()

    @router.get(USAGE_PATH)
    async def me_usage(request: Request) -> Response:
        authorization = request.headers.get("authorization")
        api_key = request.headers.get("x-api-key")
        if api_key:
            authorization = f"Bearer {api_key}"
        identity = await shared.authenticator.authenticate(authorization, request.scope)
        document = await usage_document(shared.spend, identity, window_s)
        return Response(orjson.dumps(document), media_type="application/json")

    return router


async def usage_document(spend: SpendLimiter, identity: ClientIdentity, window_s: int) -> dict[str, Any]:
    """The JSON answer of ``/v1/me/usage`` for ``identity`` (docs/contracts.md#key-usage)."""
    if identity.key_id is None:
        return {"object": "key_usage", "key_id": None, "metered": False, "spend": None, "rate_limits": []}
    usage = await spend.usage(identity)
    return {
        "object": "key_usage",
        "key_id": identity.key_id,
        "name": identity.name,
        "metered": identity.metered,
        "source": usage.source,
        "spend": _spend(identity, usage, window_s),
        "rate_limits": _rates(usage),
    }


def _spend(identity: ClientIdentity, usage: KeyUsage, window_s: int) -> dict[str, Any]:
    window, period = usage.window, identity.period
    limit = usage.limit_nano
    base = None if identity.limit_usd is None else identity.limit_usd
    ends = window.end < NEVER
    return {
        "limit_usd": base,
        "effective_limit_usd": None if limit is None else limit / NANO_PER_USD,
        "rollover_usd": None if limit is None or base is None else max(0.0, limit / NANO_PER_USD - base),
        "spent_usd": usage.spent_nano / NANO_PER_USD,
        "remaining_usd": None if limit is None else max(0, limit - usage.spent_nano) / NANO_PER_USD,
        "period": {
            "kind": period.kind if period is not None else "fixed",
            "timezone": period.timezone if period is not None else "UTC",
            "window_s": window_s if period is None else None,
            "rollover_cap_usd": period.rollover_cap_usd if period is not None else None,
            "start": _iso(window.start) if ends else None,
            "end": _iso(window.end) if ends else None,
            "resets_in_s": round(window.end - usage.now, 3) if ends else None,
        },
    }


def _rates(usage: KeyUsage) -> list[dict[str, Any]]:
    state = usage.rate
    if state is None:
        return []
    out = []
    for i, limit in enumerate(state.windows.limits):
        end = state.windows.starts[i] + limit.window_s
        entry: dict[str, Any] = {
            "window_s": limit.window_s,
            "window_start": _iso(state.windows.starts[i]),
            "resets_in": duration(end - usage.now),
            "resets_in_s": round(end - usage.now, 3),
        }
        for kind, cap, used in (
            ("requests", limit.requests, state.requests[i]),
            ("tokens", limit.tokens, state.tokens[i]),
        ):
            entry[kind] = (
                None if cap is None else {"limit": cap, "used": used, "remaining": max(0, cap - used)}
            )
        out.append(entry)
    return out


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat(timespec="seconds")
