"""Server time of the console's aggregate pages (Tiers, Keys, Policy and learning, Upstreams) on a
deployment that has served ``--requests`` requests, through the real app (in-process, admin key).

What the pages read is O(tiers x models x buckets) per replica and O(keys) (+ minutes x charted
keys), never O(requests): the seeding makes the counters of this replica and of ``--replicas - 1``
other replicas' snapshots add up to ``--requests`` served requests, stores ``--keys`` client keys with
spend counters, and ``--minutes`` minutes of their spend samples. Each page is then fetched
``--repeat`` times; the median and the worst are printed (milliseconds), with the page's size, and
the time and size of one replica's snapshot (gateway.assembly.replica_feed).
Runs on a private Redis key prefix it deletes afterwards.

    PYTHONPATH=. .venv/bin/python bench/gateway/console_aggregate_pages.py --redis redis://127.0.0.1:6379/0
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import redis

from gateway.api.app import create_app
from gateway.assembly.replica_feed import ReplicaFeed
from gateway.commands.keys import add_key
from gateway.config.settings import Settings
from gateway.redis.keys import RedisKeys
from gateway.telemetry.metrics import GatewayMetrics
from tests.support.gateway_testkit import ADMIN_KEY, POLICY_DOCUMENT, model_configs
from tests.support.in_process_gateway import serve_in_process
from tests.support.policy_files import write_policy

PAGES = ("/console/tiers", "/console/keys", "/console/policy", "/console/upstreams")
OUTCOMES = {"accepted": 0.55, "escalated": 0.3, "direct": 0.1, "error": 0.05}
ENDPOINTS = ("chat", "completions", "responses", "messages")


def serve_counts(metrics: GatewayMetrics, requests: int) -> None:
    """Count ``requests`` served requests in ``metrics``: every tier, outcome and endpoint, their
    cost, scores, upstream attempts and latencies (one observation per series stands for many)."""
    tiers = list(POLICY_DOCUMENT["tiers"])
    share = requests / (len(tiers) * len(ENDPOINTS))
    for tier in tiers:
        for outcome, part in OUTCOMES.items():
            for endpoint in ENDPOINTS:
                metrics.requests.labels(tier, outcome, endpoint).inc(share * part)
        for model in ("small", "medium", "large"):
            metrics.cost.labels(tier, model).inc(share * 0.0002)
            metrics.escalations.labels(tier, model, "large").inc(share * 0.1)
            for score in (0.05, 0.3, 0.55, 0.8, 0.97):
                metrics.confidence.labels(tier, model).observe(score)
        metrics.first_token.labels(tier, "accepted").observe(0.3)
    for model in ("small", "medium", "large"):
        for status, part in (("2xx", 0.97), ("5xx", 0.02), ("timeout", 0.01)):
            metrics.upstream_requests.labels(model, status).inc(requests * part)
        for seconds in (0.05, 0.2, 0.6, 2.0):
            metrics.upstream_duration.labels(model).observe(seconds)
        metrics.circuit_state.labels(model).set(0)


def seed(client: Any, keys: RedisKeys, n_keys: int, minutes: int) -> None:
    """``n_keys`` client keys with spend in the current window and ``minutes`` of spend samples."""
    now = time.time()
    ids = []
    for i in range(n_keys):
        _, key_id = add_key(
            client, f"team-{i:05d}", 100.0, keys, rate_limits=[{"window_s": 60, "requests": 600}]
        )
        ids.append(key_id)
    window = int(now // 3600) * 3600  # the fixed window of the bench's settings (budgets.window_s)
    pipe = client.pipeline(transaction=False)
    for i, key_id in enumerate(ids):
        pipe.set(keys.spend(key_id, window), (i + 1) * 1_000_000, ex=7200)
    last = int(now // 60) * 60
    for m in range(minutes):
        minute = last - 60 * m
        pipe.hset(keys.console_key_spend(minute), mapping={k: (i + 1) * 900_000 for i, k in enumerate(ids)})
        pipe.expire(keys.console_key_spend(minute), 3600 * 4)
    pipe.execute()


async def other_replicas(url: str, keys: RedisKeys, count: int, requests: int) -> None:
    """Snapshots of ``count`` other replicas, each having served ``requests``."""
    import redis.asyncio as aioredis

    client = aioredis.from_url(url, decode_responses=True)
    try:
        for _ in range(count):
            metrics = GatewayMetrics(with_redis=True)
            serve_counts(metrics, requests)
            await ReplicaFeed(metrics, client, keys, ttl_s=600).flush()
    finally:
        await client.aclose()


def settings_for(url: str, folder: Path) -> Settings:
    policy = write_policy(folder / "policy.json")
    return Settings.from_mapping(
        {
            "models": model_configs("http://127.0.0.1:9"),  # never called: the pages read counters
            "policy": str(policy),
            "redis_url": url,
            "console": {"enabled": True},
            "budgets": {"window_s": 3600},
            "logging": {"level": "warning"},
        }
    )


def time_pages(gateway: Any, repeat: int) -> dict[str, tuple[float, float, int]]:
    """(median ms, worst ms, bytes) of each page."""
    headers = {"authorization": f"Bearer {ADMIN_KEY}"}
    out = {}
    for path in PAGES:
        times = []
        size = 0
        for _ in range(repeat):
            started = time.perf_counter()
            response = gateway.http.get(path, headers=headers)
            times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (path, response.status_code, response.text[:300])
            size = len(response.content)
        out[path] = (statistics.median(times), max(times), size)
    return out


def time_snapshot(feed: ReplicaFeed, repeat: int) -> tuple[float, int]:
    """(median ms, bytes) of building and encoding this replica's snapshot (what its loop writes
    every 5 s, in a worker thread)."""
    times = []
    document = b""
    for _ in range(repeat):
        started = time.perf_counter()
        document = orjson.dumps(feed.snapshot())
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), len(document)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--minutes", type=int, default=180)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    keys = RedisKeys(f"cascade-bench-{uuid.uuid4().hex[:10]}")
    os.environ["CASCADE_REDIS_PREFIX"] = keys.prefix
    os.environ["CASCADE_ADMIN_KEY"] = ADMIN_KEY
    client = redis.Redis.from_url(args.redis, decode_responses=True)
    per_replica = args.requests // args.replicas
    try:
        seed(client, keys, args.keys, args.minutes)
        asyncio.run(other_replicas(args.redis, keys, args.replicas - 1, per_replica))
        with tempfile.TemporaryDirectory() as folder:
            gateway = serve_in_process(create_app(settings_for(args.redis, Path(folder))))
            try:
                serve_counts(gateway.gateway.metrics, per_replica)
                gateway.http.get(PAGES[0], headers={"authorization": f"Bearer {ADMIN_KEY}"})  # warm
                results = time_pages(gateway, args.repeat)
                snapshot = time_snapshot(gateway.gateway.feed, args.repeat)
            finally:
                gateway.stop()
    finally:
        doomed = list(client.scan_iter(match=f"{keys.prefix}:*", count=1000))
        if doomed:
            client.delete(*doomed)
        client.close()
    print(
        f"{args.requests:,} requests over {args.replicas} replicas, {args.keys:,} keys, "
        f"{args.minutes} minutes"
    )
    print(f"{'page':<22}{'median ms':>10}{'worst ms':>10}{'bytes':>10}")
    for path, (median, worst, size) in results.items():
        print(f"{path:<22}{median:>10.1f}{worst:>10.1f}{size:>10,}")
    print(f"a replica's snapshot: {snapshot[0]:.1f} ms to build and encode, {snapshot[1]:,} bytes")


if __name__ == "__main__":
    main()
