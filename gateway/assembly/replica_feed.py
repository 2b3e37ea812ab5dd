"""What each replica tells the console: a small aggregate snapshot of its metrics, and the keys' spend.

Prometheus counters in one process see only that replica, so every replica writes, from the shared
state's once-a-second Redis loop (``SharedState.ticks``, never the request path), every
``interval_s`` seconds:

* its **snapshot**: the samples of the metric families the console reads (``CONSOLE_FAMILIES``: requests,
  escalations, cost, confidence and upstream histograms, breaker state, learning counters) and its
  score-drift windows, as one JSON string ``{prefix}:console:replica:{id}`` with a TTL of ``ttl_s``,
  its id scored in ``{prefix}:console:replicas``. The console sums the live replicas' snapshots
  (gateway.assembly.deployment_totals). The size is O(tiers x models x buckets), never O(requests).
* once a **minute**, one replica (the first to set the minute's ``taken`` marker) samples every
  client key's spend in its current window into ``{prefix}:console:keyspend:{minute}`` (key id ->
  nano-USD), kept ``KEY_SPEND_KEEP_S``: the Keys page's spend over time. O(keys) a minute for the
  whole deployment.

Counters are cumulative since each replica started: a replica that stops drops out of the sums
when its snapshot expires (the console says how many replicas it summed).
"""

from __future__ import annotations

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

from gateway.keys.auth import Authenticator
from gateway.keys.spend import SpendLimiter
from gateway.redis.keys import RedisKeys
from gateway.telemetry.metrics import GatewayMetrics

log = logging.getLogger("cascade.console")

# The metric families (names without ``_total``) a snapshot carries: what the console pages read.
CONSOLE_FAMILIES = frozenset(
    {
        "cascade_requests",
        "cascade_escalations",
        "cascade_cost_usd",
        "cascade_confidence_score",
        "cascade_upstream_requests",
        "cascade_upstream_duration_seconds",
        "cascade_time_to_first_token_seconds",
        "cascade_upstream_circuit_state",
        "cascade_upstream_up",
        "cascade_policy_info",
        "cascade_learning_sampled",
        "cascade_learning_dropped",
        "cascade_learning_rows_written",
        "cascade_learning_queue_depth",
        "cascade_shadow_calls",
        "cascade_shadow_cost_usd",
        "cascade_judge_outcomes",
        "cascade_rate_limit_rejections",
        "cascade_budget_rejections",
    }
)
# How long the keys' spend samples are kept (the Keys page charts the last hours of them).
KEY_SPEND_KEEP_S = 2 * 86400


def metric_samples(metrics: GatewayMetrics) -> list[list[Any]]:
    """``[name, labels, value]`` of every sample of ``CONSOLE_FAMILIES`` (no ``_created``, no NaN)."""
    out: list[list[Any]] = []
    for family in metrics.registry.collect():
        if family.name not in CONSOLE_FAMILIES:
            continue
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
        self._redis = redis
        self._keys = keys
        self._authenticator = authenticator
        self._spend = spend
        self._policy_id = policy_id
        self.interval_s = interval_s
        self._ttl_s = ttl_s
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
        name = self._keys.console_snapshot(self.replica_id)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.set(name, orjson.dumps(self.snapshot()), px=int(self._ttl_s * 1000))
            pipe.zadd(self._keys.console_replicas, {self.replica_id: now})
            pipe.zremrangebyscore(self._keys.console_replicas, "-inf", now - self._ttl_s)
            pipe.expire(self._keys.console_replicas, int(self._ttl_s * 2) + 1)
            await pipe.execute()

    async def sample_key_spend(self) -> bool:
        """Sample every key's spend for this minute, if no replica has yet; whether this one did."""
        if self._authenticator is None or self._spend is None:
            return False
        minute = int(self._clock() // 60) * 60
        if minute == self._sampled_minute:
            return False
        self._sampled_minute = minute
        taken = await self._redis.set(self._keys.console_key_spend_taken(minute), "1", nx=True, ex=120)
        if not taken:
            return False
        stored: dict[str, str] = await self._redis.hgetall(self._keys.client_keys)  # type: ignore[misc]
        identities = self._authenticator.listed_identities(stored)
        if not identities:
            return True
        now = self._clock()
        counters = [self._keys.spend(i.key_id or "", self._spend.window(i, now).start) for i in identities]
        values = await self._redis.mget(counters)
        name = self._keys.console_key_spend(minute)
        mapping = {i.key_id: int(v or 0) for i, v in zip(identities, values, strict=True) if i.key_id}
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hset(name, mapping=mapping)
            pipe.expire(name, KEY_SPEND_KEEP_S)
            await pipe.execute()
        return True
