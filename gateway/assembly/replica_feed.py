"""What each replica tells the console: a small aggregate snapshot of its metrics, and the keys' spend.

Prometheus counters in one process see only that replica, so every replica with the console on
(``console.enabled``) and Redis writes, from the shared state's once-a-second Redis loop
(``SharedState.ticks``, never the request path), every ``interval_s`` seconds:

* its **snapshot**: the samples of the metrics the console reads (``CONSOLE_METRICS``: requests,
  escalations, cost, confidence and upstream histograms, breaker state, learning counters) and its
  score-drift windows, as one JSON string ``{prefix}:console:replica:{id}`` with a TTL of ``ttl_s``,
  its id scored in ``{prefix}:console:replicas``. The console sums the live replicas' snapshots
  (gateway.console.aggregates.deployment). The size is O(tiers x models x buckets), never O(requests).
* once a **minute**, one replica (the first to set the minute's ``taken`` marker) samples every
  client key's spend in its current window into ``{prefix}:console:keyspend:{minute}`` (key id ->
  nano-USD), kept ``KEY_SPEND_KEEP_S``: the Keys page's spend over time. O(keys) a minute for the
  whole deployment.

Counters are cumulative since each replica started: a replica that stops drops out of the sums
when its snapshot expires (the console says how many replicas it summed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections.abc import Callable
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.assembly.state import SharedState
from gateway.keys.auth import Authenticator
from gateway.keys.spend import SpendLimiter
from gateway.redis.keys import RedisKeys
from gateway.telemetry.metrics import GatewayMetrics

log = logging.getLogger("cascade.console")

# The metrics a snapshot carries (attributes of ``GatewayMetrics`` and of its ``learning``): what
# the console pages read. Collected one by one, not the whole registry (a fraction of its cost).
CONSOLE_METRICS = (
    "requests",
    "escalations",
    "cost",
    "confidence",
    "upstream_requests",
    "upstream_duration",
    "first_token",
    "circuit_state",
    "upstream_up",
    "policy_info",
    "rate_limit_rejections",
    "budget_rejections",
)
CONSOLE_LEARNING_METRICS = (
    "sampled",
    "dropped",
    "rows_written",
    "queue_depth",
    "shadow_calls",
    "shadow_cost",
    "judge_outcomes",
)
# How long the keys' spend samples are kept (the Keys page charts the last hours of them).
KEY_SPEND_KEEP_S = 2 * 86400


def metric_samples(metrics: GatewayMetrics) -> list[list[Any]]:
    """``[name, labels, value]`` of every sample of the ``CONSOLE_METRICS`` (no ``_created``, no NaN)."""
    chosen = [getattr(metrics, name) for name in CONSOLE_METRICS]
    if metrics.learning is not None:
        chosen += [getattr(metrics.learning, name) for name in CONSOLE_LEARNING_METRICS]
    out: list[list[Any]] = []
    for metric in chosen:
        for family in metric.collect():
            for sample in family.samples:
                if sample.name.endswith("_created") or math.isnan(sample.value):
                    continue
                out.append([sample.name, sample.labels, sample.value])
    return out


def drift_windows(metrics: GatewayMetrics) -> list[list[Any]]:
    """``[kind, tier, model, edges, expected, counts]`` of every score-drift window tracked now."""
    return [[*triple, edges, expected, counts] for triple, edges, expected, counts in metrics.drift.windows()]


class ReplicaFeed:
    """This replica's writer of its console snapshot and (by turns) the keys' spend samples."""

    def __init__(
        self,
        metrics: GatewayMetrics,
        redis: aioredis.Redis,
        keys: RedisKeys,
        *,
        authenticator: Authenticator | None = None,
        spend: SpendLimiter | None = None,
        policy_id: Callable[[], str | None] = lambda: None,
        interval_s: float = 5.0,
        ttl_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ):
        """``authenticator`` and ``spend``: the shared state's (None: no key spend samples);
        ``policy_id``: the served policy's id now."""
        self.replica_id = os.urandom(6).hex()
        self._metrics = metrics
        self.redis = redis
        self.keys = keys
        self._authenticator = authenticator
        self._spend = spend
        self._policy_id = policy_id
        self.interval_s = interval_s
        self.ttl_s = ttl_s
        self._clock = clock
        self._started = clock()
        self._flushed_at = -math.inf
        self._sampled_minute = -1

    def snapshot(self) -> dict[str, Any]:
        """This replica's snapshot document (see the module docstring)."""
        return {
            "replica": self.replica_id,
            "at": self._clock(),
            "started": self._started,
            "policy_id": self._policy_id(),
            "samples": metric_samples(self._metrics),
            "drift": drift_windows(self._metrics),
        }

    async def tick(self) -> None:
        """Called once a second by the shared state's loop: flush when ``interval_s`` has passed."""
        now = self._clock()
        if now - self._flushed_at < self.interval_s:
            return
        with contextlib.suppress(RedisError, OSError, TimeoutError):
            await self.flush()
            await self.sample_key_spend()

    async def flush(self) -> None:
        """Write this replica's snapshot now (the console's own replica does before it reads)."""
        now = self._clock()
        self._flushed_at = now
        name = self.keys.console_snapshot(self.replica_id)
        # Built in a worker thread (a few milliseconds of Python): the loop keeps serving meanwhile.
        document = await asyncio.to_thread(lambda: orjson.dumps(self.snapshot()))
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(name, document, px=int(self.ttl_s * 1000))
            pipe.zadd(self.keys.console_replicas, {self.replica_id: now})
            pipe.zremrangebyscore(self.keys.console_replicas, "-inf", now - self.ttl_s)
            pipe.expire(self.keys.console_replicas, int(self.ttl_s * 2) + 1)
            await pipe.execute()

    async def sample_key_spend(self) -> bool:
        """Sample every key's spend for this minute, if no replica has yet; whether this one did."""
        if self._authenticator is None or self._spend is None:
            return False
        minute = int(self._clock() // 60) * 60
        if minute == self._sampled_minute:
            return False
        self._sampled_minute = minute
        taken = await self.redis.set(self.keys.console_key_spend_taken(minute), "1", nx=True, ex=120)
        if not taken:
            return False
        stored: dict[str, str] = await self.redis.hgetall(self.keys.client_keys)  # type: ignore[misc]
        identities = self._authenticator.listed_identities(stored)
        if not identities:
            return True
        now = self._clock()
        counters = [self.keys.spend(i.key_id or "", self._spend.window(i, now).start) for i in identities]
        values = await self.redis.mget(counters)
        name = self.keys.console_key_spend(minute)
        mapping = {i.key_id: int(v or 0) for i, v in zip(identities, values, strict=True) if i.key_id}
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(name, mapping=mapping)
            pipe.expire(name, KEY_SPEND_KEEP_S)
            await pipe.execute()
        return True


def console_feed(
    metrics: GatewayMetrics, shared: SharedState, enabled: bool, policy_id: Callable[[], str | None]
) -> ReplicaFeed | None:
    """This replica's feed when the console is ``enabled`` and the state has Redis, its ``tick`` added
    to the shared state's 1 s loop (nothing on the request path); else None."""
    if not enabled or shared.redis is None:
        return None
    feed = ReplicaFeed(
        metrics,
        shared.redis,
        shared.keys,
        authenticator=shared.authenticator,
        spend=shared.spend,
        policy_id=policy_id,
    )
    shared.ticks.append(feed.tick)
    return feed
