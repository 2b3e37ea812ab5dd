"""The Upstreams page's data: per configured model, attempts, failures by kind, latency quantiles and
breaker state; time to first token per tier (the gateway measures it per streamed request, not per
model).

From the deployment's summed counters (gateway.console.aggregates.deployment):
``cascade_upstream_requests_total{model, status}`` (a status other than ``2xx`` is a failure of that
kind), ``cascade_upstream_duration_seconds`` and ``cascade_time_to_first_token_seconds`` buckets
(quantiles interpolated as ``histogram_quantile`` does); the breaker from each replica's
``cascade_upstream_circuit_state`` and the replicas' shared hash ``{prefix}:breaker:{model}``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import redis.asyncio as aioredis

from gateway.console.aggregates.deployment import Deployment, quantile
from gateway.redis.keys import RedisKeys

QUANTILES = (0.5, 0.9, 0.99)
_STATES = {0: "closed", 1: "open", 2: "half-open"}


@dataclass
class BreakerView:
    """A model's breaker: each replica's state, and the shared failure count and open-until time."""

    states: dict[str, str]  # replica id -> closed | open | half-open
    shared_failures: int | None
    open_until: float | None

    @property
    def summary(self) -> str:
        """``open`` when any replica has it open, else ``half-open`` if any, else ``closed``."""
        found = set(self.states.values())
        for state in ("open", "half-open", "closed"):
            if state in found:
                return state
        return "unknown"


@dataclass
class UpstreamView:
    """One model's row."""

    model: str
    attempts: int
    failures: dict[str, int]  # status kind -> attempts
    latency_s: dict[float, float | None]  # quantile -> seconds
    breaker: BreakerView

    @property
    def failure_rate(self) -> float | None:
        """Failed attempts over attempts (None without attempts)."""
        return sum(self.failures.values()) / self.attempts if self.attempts else None


@dataclass
class FirstTokenView:
    """Time to the first token of a tier's streamed requests: count and quantiles."""

    tier: str
    streams: int
    quantiles_s: dict[float, float | None]


@dataclass
class UpstreamsView:
    """The page."""

    models: list[UpstreamView]
    first_token: list[FirstTokenView]
    replicas: int
    redis_error: str | None = None


def _breaker(deployment: Deployment, model: str, shared: list[str | None]) -> BreakerView:
    states = {
        replica: _STATES.get(int(value), "unknown")
        for replica, _, value in deployment.per_replica("cascade_upstream_circuit_state", model=model)
    }
    failures, open_until = shared
    return BreakerView(
        states,
        int(float(failures)) if failures is not None else None,
        float(open_until) if open_until is not None else None,
    )


def upstream_view(deployment: Deployment, model: str, shared: list[str | None]) -> UpstreamView:
    """One model's row; ``shared``: its breaker hash's ``failures`` and ``open_until``."""
    attempts = 0.0
    failures: dict[str, int] = {}
    for labels, value in deployment.series("cascade_upstream_requests_total", model=model):
        attempts += value
        if labels.get("status") != "2xx" and value:
            failures[labels.get("status", "?")] = int(value)
    buckets = deployment.buckets("cascade_upstream_duration_seconds", model=model)
    latency = {q: quantile(buckets, q) for q in QUANTILES}
    return UpstreamView(model, int(attempts), failures, latency, _breaker(deployment, model, shared))


async def upstreams_view(
    deployment: Deployment, models: Collection[str], redis: aioredis.Redis | None, keys: RedisKeys
) -> UpstreamsView:
    """Every configured model's row (one pipeline of the breaker hashes) and first token per tier."""
    names = sorted(models)
    shared: list[list[str | None]] = [[None, None] for _ in names]
    if redis is not None and names and deployment.redis_error is None:
        async with redis.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hmget(keys.breaker(name), ["failures", "open_until"])
            shared = await pipe.execute()
    rows = [upstream_view(deployment, name, pair) for name, pair in zip(names, shared, strict=True)]
    tiers = sorted(
        {labels["tier"] for labels, _ in deployment.series("cascade_time_to_first_token_seconds_count")}
    )
    first = []
    for tier in tiers:
        buckets = deployment.buckets("cascade_time_to_first_token_seconds", tier=tier)
        streams = int(buckets[-1][1]) if buckets else 0
        first.append(FirstTokenView(tier, streams, {q: quantile(buckets, q) for q in QUANTILES}))
    return UpstreamsView(rows, first, deployment.replicas, deployment.redis_error)
