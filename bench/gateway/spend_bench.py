"""CPU of the keyed path's Redis work alone: reserve + settle rounds of a SpendLimiter (run by hand).

N concurrent tasks (uvloop, one process) each loop over: reserve a worst case, yield once (where the
upstream call would be), settle half of it; with the request-path Redis client and timeout the
gateway builds (``gateway.assembly.state.connect_redis``). Prints the process CPU time per round. Keys go
under a private prefix and are deleted afterwards. It measures the ``gateway`` package it imports
(``PYTHONPATH=<checkout>`` picks one). Run it pinned to one CPU, e.g.:

    taskset -c 1 .venv/bin/python bench/gateway/spend_bench.py --concurrency 1 64 --rounds 20000

Its instructions per round, which a loaded machine does not change: run it under callgrind at two
round counts and divide the difference (startup cancels out), with ``--timeout 5``:

    valgrind --tool=callgrind --callgrind-out-file=N.out .venv/bin/python \
        bench/gateway/spend_bench.py --concurrency 1 --rounds N --timeout 5
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

import uvloop

from gateway.assembly.state import connect_redis
from gateway.keys.auth import ClientIdentity
from gateway.keys.spend import SpendLimiter
from gateway.redis.keys import RedisKeys


async def measure(url: str, concurrency: int, rounds: int, timeout_s: float = 0.1) -> tuple[float, float]:
    """(CPU us, wall us) per round, after one discarded warm-up pass."""
    keys = RedisKeys(f"cascade-spend-bench-{uuid.uuid4().hex[:8]}")
    request_redis = connect_redis(url, timeout_s)
    maintenance = connect_redis(url)
    limiter = SpendLimiter(window_s=3600, redis=request_redis, keys=keys, maintenance_redis=maintenance)
    await limiter.maintain()  # learn the spend epoch, as the gateway does at start
    identity = ClientIdentity("bench", 1e9)
    done = 0

    async def client() -> None:
        nonlocal done
        while done < rounds:
            done += 1
            reservation = await limiter.reserve(identity, 0.001)
            await asyncio.sleep(0)
            await limiter.settle(reservation, 0.0005)

    try:
        for _ in range(2):
            done = 0
            cpu, wall = time.process_time(), time.perf_counter()
            await asyncio.gather(*(client() for _ in range(concurrency)))
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        assert limiter.unsynced_usd() == 0.0, "a Redis call failed: the numbers would not be Redis work"
    finally:
        doomed = await maintenance.keys(f"{keys.prefix}:*")
        if doomed:
            await maintenance.delete(*doomed)
        await request_redis.aclose()
        await maintenance.aclose()
    return cpu / done * 1e6, wall / done * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--rounds", type=int, default=20000, help="reserve + settle rounds per measurement")
    parser.add_argument(
        "--timeout",
        type=float,
        default=0.1,
        help="request-path Redis timeout, seconds (the gateway's default; raise it under callgrind, "
        "where a call takes longer and would fall back to counting in process)",
    )
    args = parser.parse_args()
    for concurrency in args.concurrency:
        cpu, wall = uvloop.run(measure(args.redis, concurrency, args.rounds, args.timeout))
        print(f"concurrency {concurrency:>3}: {cpu:7.1f} us CPU, {wall:7.1f} us wall per reserve + settle")


if __name__ == "__main__":
    main()
