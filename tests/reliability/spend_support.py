"""Helpers of the spend reliability tests: send requests through real replicas, read the money.

* ``send(replica, api_key, **body)``: one chat completion through the official SDK (a legacy
  ``/v1/completions`` request with ``endpoint="completions"``); returns the HTTP status (200, 429,
  503, ...) and the elapsed seconds.
* ``burst(replicas, api_key, count, **body)``: ``count`` concurrent requests, round-robin over the
  replicas (``endpoint`` as for ``send``); the list of statuses.
* ``Money``: what the scripted upstream produced (priced at ``PRICES``) next to the key's Redis
  counter (bound it with ``tests.support.money.worst_case_usd({"messages": MESSAGES, **body}, ...)``).
* ``wait_until(predicate, timeout_s)``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import openai
from processes import NANO_PER_USD, RedisServer, spend_counter_nano, true_cost_usd

from tests.support.gateway_process import GatewayProcess
from tests.support.scripted_upstream import ScriptedUpstream

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
DEFAULT_COMPLETION_BOUND = 4096


async def send_async(
    replica: GatewayProcess, api_key: str, *, endpoint: str = "chat", **body: Any
) -> tuple[int, float]:
    """One chat completion (``endpoint="completions"``: a legacy completion); (HTTP status, seconds)."""
    started = time.monotonic()
    async with replica.async_client(api_key) as client:
        try:
            if endpoint == "completions":
                await client.completions.create(**body)
            else:
                body.setdefault("messages", MESSAGES)
                await client.chat.completions.create(**body)
            status = 200
        except openai.APIStatusError as exc:
            status = exc.status_code
    return status, time.monotonic() - started


def limited_replicas(
    start_replicas: Callable[..., list[GatewayProcess]], redis: Any, key: str, limit_usd: float
) -> list[GatewayProcess]:
    """Two replicas sharing ``redis``, serving only ``key``, limited to ``limit_usd``.

    Redis calls get 1 s instead of the default 0.1 s: these tests are about what is reserved while
    Redis answers, and on a saturated test machine a 0.1 s call can time out, which sends the
    replica to its outage rule (tested in test_spend_redis_faults.py).
    """
    return start_replicas(
        2, redis=redis, env={"CASCADE_API_KEYS": key}, budgets={"limit_usd": limit_usd}, redis_timeout_s=1.0
    )


def send(replica: GatewayProcess, api_key: str, *, endpoint: str = "chat", **body: Any) -> tuple[int, float]:
    """``send_async`` from sync code."""
    return asyncio.run(send_async(replica, api_key, endpoint=endpoint, **body))


def burst(
    replicas: Sequence[GatewayProcess], api_key: str, count: int, *, endpoint: str = "chat", **body: Any
) -> list[int]:
    """``count`` concurrent requests spread round-robin over ``replicas``; their statuses."""

    async def run() -> list[int]:
        results = await asyncio.gather(
            *(
                send_async(replicas[i % len(replicas)], api_key, endpoint=endpoint, **dict(body))
                for i in range(count)
            )
        )
        return [status for status, _ in results]

    return asyncio.run(run())


def wait_until(predicate: Callable[[], bool], timeout_s: float = 15.0, every_s: float = 0.1) -> bool:
    """Poll ``predicate`` until it is true or ``timeout_s`` passed; its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every_s)
    return predicate()


class Money:
    """The true spend (what the upstream produced) and the key's Redis counter, in USD."""

    def __init__(self, upstream: ScriptedUpstream, redis_server: RedisServer, api_key: str):
        self.upstream = upstream
        self.redis_server = redis_server
        self.api_key = api_key

    def true_usd(self) -> float:
        """Price of everything the upstream sent in full."""
        return true_cost_usd(list(self.upstream.produced))

    def counter_usd(self) -> float:
        """The key's spend counter(s) in Redis."""
        with self.redis_server.client() as client:
            return spend_counter_nano(client, self.api_key) / NANO_PER_USD

    def pending_reservations(self) -> int:
        """Reservations recorded in Redis and not settled (every window of every key)."""
        with self.redis_server.client() as client:
            return sum(int(client.hlen(name)) for name in client.scan_iter(match="cascade:spend:*:pending"))


def settled(replicas: Sequence[GatewayProcess]) -> bool:
    """No replica holds spend that Redis does not have yet."""
    return all(r.sample("cascade_spend_unsynced_usd") == 0.0 for r in replicas)
