"""One chat completion to a collection target, with bounded retries (``cascade collect``'s calls)."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import httpx

from collection.targets import Target

RETRY_STATUSES = {429, 500, 502, 503, 504}


class CallError(Exception):
    """An upstream call failed after its retries."""


async def call_model(
    client: httpx.AsyncClient, target: Target, payload: dict[str, Any], retries: int
) -> tuple[dict[str, Any], float]:
    """POST one chat completion with bounded retries (429/5xx/connection errors); (body, latency ms)."""
    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
    url = f"{target.base_url.rstrip('/')}/chat/completions"
    last = ""
    for attempt in range(retries + 1):
        started = time.perf_counter()
        try:
            response = await client.post(url, json=payload, headers=headers, timeout=target.timeout_s)
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
        else:
            latency_ms = (time.perf_counter() - started) * 1000
            if response.status_code == 200:
                try:
                    return response.json(), latency_ms
                except ValueError as exc:
                    raise CallError(f"{target.name}: response is not JSON") from exc
            last = f"HTTP {response.status_code}: {response.text[:200]}"
            if response.status_code not in RETRY_STATUSES:
                break
        if attempt < retries:
            await asyncio.sleep(min(4.0, 0.5 * 2**attempt) * (0.5 + random.random()))
    raise CallError(f"{target.name}: {last}")
