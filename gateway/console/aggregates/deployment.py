"""The whole deployment's aggregates: the live replicas' snapshots (gateway.assembly.replica_feed), summed.

One ``ZRANGEBYSCORE`` and one ``MGET`` of O(replicas) small documents; summing is
O(replicas x series). Counters and histogram buckets add up across replicas; gauges (a breaker's
state, a queue's depth) are read per replica (``per_replica``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.assembly.replica_feed import ReplicaFeed, drift_windows, metric_samples
from gateway.redis.keys import RedisKeys
from gateway.telemetry.metrics import GatewayMetrics

# A series: its sample name and its labels, sorted.
SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass
class DriftWindow:
    """One (kind, tier, model) score window summed over the replicas: bin edges, the calibration's
    shares per bin and the live counts per bin."""

    edges: list[float]
    expected: list[float]
    counts: list[int]


@dataclass
class Deployment:
    """The summed samples of every live replica's snapshot, and the snapshots themselves."""

    snapshots: list[dict[str, Any]] = field(default_factory=list)
    totals: dict[SeriesKey, float] = field(default_factory=dict)
    drift: dict[tuple[str, str, str], DriftWindow] = field(default_factory=dict)
    redis_error: str | None = None

    @property
    def replicas(self) -> int:
        """How many replicas' snapshots were summed."""
        return len(self.snapshots)

    def series(self, name: str, **match: str) -> Iterator[tuple[dict[str, str], float]]:
        """(labels, summed value) of every series of sample ``name`` whose labels include ``match``."""
        for (sample, labels), value in self.totals.items():
            if sample != name:
                continue
            found = dict(labels)
            if all(found.get(k) == v for k, v in match.items()):
                yield found, value

    def total(self, name: str, **match: str) -> float:
        """The sum of every series of sample ``name`` whose labels include ``match``."""
        return sum(value for _, value in self.series(name, **match))

    def buckets(self, name: str, **match: str) -> list[tuple[float, float]]:
        """Cumulative ``(le, count)`` of histogram ``name`` (its ``_bucket`` samples) summed over the
        series matching ``match``, by ascending bound."""
        summed: dict[float, float] = {}
        for labels, value in self.series(f"{name}_bucket", **match):
            bound = float(labels["le"])
            summed[bound] = summed.get(bound, 0.0) + value
        return sorted(summed.items())

    def per_replica(self, name: str, **match: str) -> list[tuple[str, dict[str, str], float]]:
        """(replica id, labels, value) of sample ``name`` in each snapshot (for gauges)."""
        out = []
        for snapshot in self.snapshots:
            for sample, labels, value in snapshot.get("samples", ()):
                if sample == name and all(labels.get(k) == v for k, v in match.items()):
                    out.append((str(snapshot.get("replica")), labels, float(value)))
        return out


def sum_snapshots(snapshots: list[dict[str, Any]]) -> Deployment:
    """Add up the samples and drift windows of ``snapshots`` (each a replica's document)."""
    deployment = Deployment(snapshots=snapshots)
    totals = deployment.totals
    for snapshot in snapshots:
        for sample, labels, value in snapshot.get("samples", ()):
            key = (sample, tuple(sorted(labels.items())))
            totals[key] = totals.get(key, 0.0) + float(value)
        for kind, tier, model, edges, expected, counts in snapshot.get("drift", ()):
            window = deployment.drift.get((kind, tier, model))
            if window is None or len(window.counts) != len(counts):
                deployment.drift[(kind, tier, model)] = DriftWindow(list(edges), list(expected), list(counts))
            else:
                window.counts = [a + b for a, b in zip(window.counts, counts, strict=True)]
    return deployment


async def read_deployment(
    redis: aioredis.Redis, keys: RedisKeys, *, ttl_s: float = 30.0, now: float | None = None
) -> Deployment:
    """The live replicas' snapshots (written within ``ttl_s``), summed."""
    now = time.time() if now is None else now
    ids = await redis.zrangebyscore(keys.console_replicas, now - ttl_s, "+inf")
    if not ids:
        return Deployment()
    raw = await redis.mget([keys.console_snapshot(i) for i in ids])
    snapshots = [orjson.loads(document) for document in raw if document]
    return sum_snapshots(snapshots)


def quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """The ``q`` quantile of cumulative ``(le, count)`` buckets, interpolated inside its bucket as
    Prometheus's ``histogram_quantile`` does (None without observations; the highest finite bound
    when it falls in the ``+Inf`` bucket)."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


def bucket_counts(buckets: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Cumulative ``(le, count)`` buckets as per-bucket counts (for a histogram chart)."""
    out, previous = [], 0.0
    for bound, count in buckets:
        out.append((bound, count - previous))
        previous = count
    return out


def ratio(part: float, whole: float) -> float | None:
    """``part / whole``, None when ``whole`` is 0 (no traffic: nothing to show, not a zero)."""
    return part / whole if whole else None


async def deployment_now(feed: ReplicaFeed | None, metrics: GatewayMetrics) -> Deployment:
    """The deployment as the console shows it: with Redis, this replica's snapshot written now and
    every live replica's read back, summed; without (or while Redis does not answer), this replica's
    own snapshot (``Deployment.replicas`` is then 1 and ``redis_error`` says why)."""
    if feed is not None:
        try:
            await feed.flush()
            return await read_deployment(feed.redis, feed.keys, ttl_s=feed.ttl_s)
        except (RedisError, OSError) as exc:
            own = sum_snapshots([_own(metrics)])
            own.redis_error = f"Redis did not answer ({type(exc).__name__}): this replica's counts only"
            return own
    return sum_snapshots([_own(metrics)])


def _own(metrics: GatewayMetrics) -> dict[str, Any]:
    return {"replica": "local", "samples": metric_samples(metrics), "drift": drift_windows(metrics)}
