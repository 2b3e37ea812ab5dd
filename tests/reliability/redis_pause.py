"""Rate limits while a private Redis pauses: replicas that are real gateway apps (in process, the
scripted upstream through the in-process transport), one key limited to ``requests`` a minute, and a
burst that meets a Redis pause (tests/reliability/test_rate_limits_redis_pause.py and
bench/gateway/redis_pause_limits.py use it).

* ``rated_replicas(n, redis_url, upstream, workdir, requests=..., **changes)``: ``n`` started
  ``InProcessGateway`` s (stop them after); ``changes`` replace config sections or merge into
  ``budgets`` (``budgets={"outage_after_s": 0.2}``). The caller sets ``CASCADE_API_KEYS`` to the key.
* ``client_pause(server, seconds)``: ``CLIENT PAUSE ... ALL``: Redis answers no client for that
  long, then runs what arrived (a slow Redis that ends by itself).
* ``burst(replicas, key, count, before=k, pause=...)``: ``k`` requests answered one by one
  (through Redis), then ``pause()`` (a callable that starts the pause), then the other
  ``count - k`` at once, round-robin over the replicas; the statuses, in order.
* ``rate_requests(server, key)``: the requests Redis counted in the key's current minute window.
* ``all_live(replicas)``: waits until each replica has read that all are live.
* ``live_replicas(replica)``, ``degraded_entries(replica)``, ``fallbacks(replica)``: its metrics.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gateway.api.app import create_app
from gateway.config.settings import Settings
from tests.reliability.processes import RedisServer, key_id
from tests.support.gateway_testkit import model_configs
from tests.support.in_process_gateway import InProcessGateway, scripted_transport, serve_in_process
from tests.support.policy_files import write_policy
from tests.support.scripted_upstream import ScriptedUpstream, ok

WINDOW_S = 60
BODY = {"model": "large", "max_tokens": 16, "messages": [{"role": "user", "content": "Capital of France?"}]}
FALLBACK_REASONS = ("timeout", "error", "down", "epoch", "refused")


def rated_replicas(
    n: int,
    redis_url: str,
    upstream: ScriptedUpstream,
    workdir: Path,
    *,
    requests: int,
    **changes: Any,
) -> list[InProcessGateway]:
    """``n`` started replicas sharing ``redis_url``; every key limited to ``requests`` a minute."""
    upstream.set_default("up-large", ok(usage=(5, 5)))
    budgets = {"limit_usd": 1000.0, "rate_limits": [{"window_s": WINDOW_S, "requests": requests}]}
    budgets.update(changes.pop("budgets", {}))
    document: dict[str, Any] = {
        "models": model_configs(upstream.base_url),
        "policy": str(write_policy(workdir / "policy.json")),
        "redis_url": redis_url,
        "budgets": budgets,
        "limits": {"max_body_bytes": 65536, "request_timeout_s": 20},
        "logging": {"level": "warning"},
        **changes,
    }
    settings = Settings.from_mapping(document)
    return [serve_in_process(create_app(settings, transport=scripted_transport(upstream))) for _ in range(n)]


def client_pause(server: RedisServer, seconds: float) -> None:
    """``CLIENT PAUSE`` every client of ``server`` for ``seconds`` (returns at once)."""
    with server.client() as client:
        client.execute_command("CLIENT", "PAUSE", round(seconds * 1000), "ALL")


def burst(
    replicas: Sequence[InProcessGateway],
    key: str,
    count: int,
    *,
    before: int,
    pause: Callable[[], None],
) -> list[int]:
    """``before`` requests one by one, then ``pause()``, then the rest at once (round-robin)."""

    async def run() -> list[int]:
        clients = [replica.async_http_client() for replica in replicas]
        headers = {"authorization": f"Bearer {key}"}

        async def send(i: int) -> int:
            client = clients[i % len(clients)]
            return (await client.post("/v1/chat/completions", json=BODY, headers=headers)).status_code

        try:
            statuses = [await send(i) for i in range(before)]
            pause()
            statuses += await asyncio.gather(*(send(i) for i in range(before, count)))
        finally:
            for client in clients:
                await client.aclose()
        return statuses

    return asyncio.run(run())


def in_one_window(margin_s: float = 5.0) -> None:
    """Return when at least ``margin_s`` of the current minute window is left (a burst then counts
    in one window: waits at most ``margin_s``)."""
    left = WINDOW_S - time.time() % WINDOW_S
    if left < margin_s:
        time.sleep(left + 0.05)


def rate_requests(server: RedisServer, key: str) -> int:
    """The requests Redis counted in the key's current window of the minute limit."""
    start = int(time.time() // WINDOW_S) * WINDOW_S
    with server.client() as client:
        return int(client.hget(f"cascade:rate:{key_id(key)}:{WINDOW_S}:{start}", "r") or 0)


def live_replicas(replica: InProcessGateway) -> float:
    """The live replicas ``replica`` last read from Redis (``cascade_replicas_live``)."""
    return replica.sample("cascade_replicas_live")


def all_live(replicas: Sequence[InProcessGateway], timeout_s: float = 5.0) -> bool:
    """Wait until every replica has read that all of them are live (their heartbeats go to Redis
    about once a second); whether they did within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while any(live_replicas(r) != len(replicas) for r in replicas):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def degraded_entries(replica: InProcessGateway) -> float:
    """Times ``replica`` entered degraded mode."""
    return replica.sample("cascade_limits_degraded_entered_total")


def fallbacks(replica: InProcessGateway) -> float:
    """Keyed requests ``replica`` decided without Redis (any reason)."""
    return sum(replica.sample("cascade_spend_fallback_total", reason=r) for r in FALLBACK_REASONS)
