"""Redis commands and round trips per keyed request: a reservation and its settlement through the
spend limiter's request-path batcher (gateway.redis.batch), one request in flight and 64 at once.

Counts, not times: a ``RedisBatcher`` that counts the commands it sends and the pipelines (round
trips) they went in. Rows: a key with a USD limit only (the keyed path as it was), and, where the
code has them, a key with three rate-limit windows and a monthly budget period with rollover. Runs
against whichever code ``PYTHONPATH`` selects, on a private key prefix it deletes afterwards.

    PYTHONPATH=. .venv/bin/python bench/gateway/keyed_round_trips.py --redis redis://127.0.0.1:6379/0
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import uuid
from typing import Any

import redis.asyncio as aioredis

from gateway.keys.auth import ClientIdentity
from gateway.keys.spend import SpendLimiter
from gateway.redis.batch import RedisBatcher
from gateway.redis.keys import RedisKeys

WITH_LIMITS = "rate_limits" in inspect.signature(ClientIdentity).parameters


class CountingBatcher(RedisBatcher):
    """Counts the commands sent and the pipelines (round trips) that carried them."""

    def __init__(self, redis: Any, timeout_s: float | None) -> None:
        super().__init__(redis, timeout_s)
        self.commands = 0
        self.round_trips = 0

    async def _pipeline(self, commands: list[Any], replies: list[Any]) -> None:
        self.commands += len(commands)
        self.round_trips += 1
        await super()._pipeline(commands, replies)


def identities() -> dict[str, ClientIdentity]:
    rows = {"spend only": ClientIdentity("k-spend", 1e6)}
    if WITH_LIMITS:
        from gateway.config.key_settings import BudgetPeriod, RateLimit

        limits = (
            RateLimit(window_s=1, requests=10**9),
            RateLimit(window_s=60, requests=10**9, tokens=10**12),
            RateLimit(window_s=86400, tokens=10**12),
        )
        period = BudgetPeriod(kind="monthly", timezone="Europe/Berlin", rollover_cap_usd=1.0)
        rows["3 rate windows + period"] = ClientIdentity(  # type: ignore[call-arg]
            "k-limits", 1e6, rate_limits=limits, period=period
        )
    return rows


async def one(limiter: SpendLimiter, identity: ClientIdentity) -> None:
    if WITH_LIMITS:
        reservation = await limiter.reserve(identity, 0.001, 500)  # type: ignore[call-arg]
    else:
        reservation = await limiter.reserve(identity, 0.001)
    await limiter.settle(reservation, 0.0005)


async def main(url: str, requests: int) -> None:
    keys = RedisKeys(f"cascade-bench-{uuid.uuid4().hex[:8]}")
    cleanup = aioredis.from_url(url)
    try:
        for name, identity in identities().items():
            for concurrency in (1, 64):
                batcher = CountingBatcher(aioredis.from_url(url, decode_responses=True), 2.0)
                limiter = SpendLimiter(window_s=3600, redis=batcher, keys=keys, timeout_s=2.0)
                await limiter.maintain()  # the epoch, once per replica at start
                batcher.commands = batcher.round_trips = 0
                for _ in range(requests // concurrency):
                    await asyncio.gather(*(one(limiter, identity) for _ in range(concurrency)))
                done = requests // concurrency * concurrency
                commands, trips = batcher.commands / done, batcher.round_trips / done
                print(f"| {name} | {concurrency} | {commands:.2f} | {trips:.3f} |")
                await batcher.redis.aclose()
    finally:
        doomed = [k async for k in cleanup.scan_iter(match=f"{keys.prefix}:*")]
        if doomed:
            await cleanup.delete(*doomed)
        await cleanup.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--requests", type=int, default=640)
    args = parser.parse_args()
    print("| key | in flight | Redis commands/request | round trips/request |\n|---|---:|---:|---:|")
    asyncio.run(main(args.redis, args.requests))
