"""Upstream health as metrics, and what ``/readyz`` reports.

Readiness means "this replica can serve": a policy is loaded (Redis being down does not matter,
because the documented fallback serves: last good policy, cached and environment keys, in-memory
spend). Upstream health is *not* part of it: one shared upstream outage would otherwise take every
replica out of the load balancer at once, although the cascade routes around a failed cheap model
and a passthrough to another model still works. Instead a background task probes every upstream
every ``interval_s`` seconds (never per ``/readyz`` call) and exports ``cascade_upstream_up{model}``.

``/readyz`` shows only ``{"ready": ...}`` to anonymous callers; the details (policy id, source,
last policy error, Redis, upstreams) need the admin key, because they contain file paths and
policy errors.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp

from gateway.telemetry.metrics import GatewayMetrics
from gateway.upstream.pool import UpstreamPool

log = logging.getLogger("cascade.health")

# How often every upstream is probed, and how long one probe may take.
PROBE_INTERVAL_S = 15.0
PROBE_TIMEOUT_S = 2.0


class UpstreamHealth:
    """Probes ``GET {base_url}/models`` of every upstream in the background; up = any answer < 500."""

    def __init__(
        self,
        pool: UpstreamPool,
        metrics: GatewayMetrics,
        *,
        interval_s: float = PROBE_INTERVAL_S,
        timeout_s: float = PROBE_TIMEOUT_S,
    ):
        self._pool = pool
        self._metrics = metrics
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.up: dict[str, bool | None] = dict.fromkeys(pool.clients)
        self.checked_at: float | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start probing (the first round right away)."""
        self._task = asyncio.create_task(self._loop(), name="upstream-health")

    async def close(self) -> None:
        """Stop probing."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def status(self) -> dict[str, Any]:
        """Last probe results per model (None: not probed yet) and when they were taken."""
        return {"upstreams": dict(self.up), "upstreams_checked_at": self.checked_at}

    async def probe_all(self) -> None:
        """Probe every upstream once, concurrently, and publish the results."""
        names = list(self._pool.clients)
        results = await asyncio.gather(*(self._probe(name) for name in names))
        for name, up in zip(names, results, strict=True):
            if self.up[name] is not None and self.up[name] != up:
                log.warning("upstream %s is %s", name, "up again" if up else "DOWN (probe failed)")
            self.up[name] = up
            self._metrics.upstream_up.labels(name).set(1 if up else 0)
        self.checked_at = time.time()

    async def _probe(self, name: str) -> bool:
        client = self._pool[name]
        try:
            async with client.session.get(
                client.config.base_url + "/models",
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                headers=client.auth_headers,
                allow_redirects=False,
            ) as response:
                await response.read()
                return response.status < 500
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False

    async def _loop(self) -> None:
        while True:
            try:
                await self.probe_all()
            except asyncio.CancelledError:
                raise
            except Exception:  # a probe bug must not end health reporting; the next round runs
                log.exception("upstream health probe failed")
            await asyncio.sleep(self.interval_s)
