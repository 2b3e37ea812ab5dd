"""The Policy and learning page's data: the served policy, the last recalibration, sampled traffic.

The served policy and when it was loaded come from this replica's policy store; which policy each
replica serves from their snapshots (they differ only while a push is being picked up). The last
recalibration is the JSON report ``cascade recalibrate`` keeps in Redis
(``{prefix}:recalibration:last``): its held-out comparison per tier and whether it was pushed.
Sampled-traffic volume and labels are the deployment's summed learning counters
(``cascade_learning_*``, ``cascade_shadow_*``, ``cascade_judge_outcomes_total``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.console.aggregates.deployment import Deployment
from gateway.console.aggregates.tiers import mechanism, route_texts
from gateway.redis.keys import RedisKeys
from policies import Policy


@dataclass
class ServedTier:
    """A tier of the served policy: its mechanism and routes."""

    name: str
    mechanism: str
    routes: list[str]
    default: bool


@dataclass
class RecalibrationTier:
    """One tier of the last recalibration: held-out means of the current and new policy, verdict."""

    name: str
    current: dict[str, float | None]
    new: dict[str, float | None]
    ok: bool


@dataclass
class Recalibration:
    """The last recalibration report's summary."""

    created_at: str
    new_policy_id: str | None
    current_policy_id: str | None
    accepted: bool
    reason: str | None
    pushed: bool
    version: int | None
    tiers: list[RecalibrationTier]


@dataclass
class Learning:
    """Sampled traffic across the deployment: drawn per tier, dropped per reason, rows written,
    shadow calls per outcome, shadow spend, labels per outcome."""

    sampled: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    rows_written: int = 0
    shadow_calls: dict[str, int] = field(default_factory=dict)
    shadow_cost_usd: float = 0.0
    labels: dict[str, int] = field(default_factory=dict)


@dataclass
class PolicyView:
    """The page."""

    policy_id: str | None
    created_at: str | None
    loaded_at: str | None
    source: str | None
    version: str | None
    reload_failures: int
    last_error: str | None
    tiers: list[ServedTier]
    replicas_serving: dict[str, int]  # policy id -> replicas
    recalibration: Recalibration | None
    learning: Learning | None


async def last_recalibration(redis: aioredis.Redis | None, keys: RedisKeys) -> dict[str, Any] | None:
    """The last recalibration report stored in Redis (None without one, or unreadable)."""
    if redis is None:
        return None
    try:
        raw = await redis.get(keys.recalibration_last)
    except (RedisError, OSError):
        return None
    if not raw:
        return None
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return document if isinstance(document, dict) else None


def _means(side: dict[str, Any] | None) -> dict[str, float | None]:
    side = side or {}
    return {m: (side.get(m) or {}).get("mean") for m in ("quality", "cost_usd", "escalation_rate")}


def recalibration_summary(report: dict[str, Any] | None) -> Recalibration | None:
    """What the page shows of a recalibration report (docs/contracts.md, "Recalibration")."""
    if report is None:
        return None
    decision = report.get("decision") or {}
    tiers = [
        RecalibrationTier(name, _means(row.get("current")), _means(row.get("new")), bool(row.get("ok")))
        for name, row in (report.get("tiers") or {}).items()
    ]
    return Recalibration(
        created_at=str(report.get("created_at", "?")),
        new_policy_id=(report.get("new_policy") or {}).get("policy_id"),
        current_policy_id=(report.get("current_policy") or {}).get("policy_id"),
        accepted=bool(decision.get("accepted")),
        reason=decision.get("reason"),
        pushed=bool(decision.get("pushed")),
        version=decision.get("version"),
        tiers=tiers,
    )


def _by_label(deployment: Deployment, name: str, label: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for labels, value in deployment.series(name):
        out[labels.get(label, "?")] = out.get(labels.get(label, "?"), 0) + int(value)
    return out


def learning_summary(deployment: Deployment) -> Learning | None:
    """The learning counters summed (None when no replica samples traffic)."""
    if not any(sample.startswith("cascade_learning_") for sample, _ in deployment.totals):
        return None
    return Learning(
        sampled=_by_label(deployment, "cascade_learning_sampled_total", "tier"),
        dropped=_by_label(deployment, "cascade_learning_dropped_total", "reason"),
        rows_written=int(deployment.total("cascade_learning_rows_written_total")),
        shadow_calls=_by_label(deployment, "cascade_shadow_calls_total", "outcome"),
        shadow_cost_usd=deployment.total("cascade_shadow_cost_usd_total"),
        labels=_by_label(deployment, "cascade_judge_outcomes_total", "outcome"),
    )


def _iso(moment: Any) -> str | None:
    if not isinstance(moment, int | float):
        return None
    return datetime.fromtimestamp(moment, UTC).isoformat(timespec="seconds")


def policy_view(
    policy: Policy | None, status: dict[str, Any], deployment: Deployment, report: dict[str, Any] | None
) -> PolicyView:
    """The page from the served ``policy``, its store's ``status()``, the deployment and the report."""
    tiers = []
    if policy is not None:
        tiers = [
            ServedTier(name, mechanism(tier), route_texts(tier), name == policy.default_tier)
            for name, tier in policy.tiers.items()
        ]
    serving: dict[str, int] = {}
    for snapshot in deployment.snapshots:
        served = str(snapshot.get("policy_id"))
        serving[served] = serving.get(served, 0) + 1
    return PolicyView(
        policy_id=policy.policy_id if policy is not None else None,
        created_at=policy.created_at if policy is not None else None,
        loaded_at=_iso(status.get("loaded_at")),
        source=status.get("source"),
        version=status.get("version"),
        reload_failures=int(status.get("reload_failures") or 0),
        last_error=status.get("last_error"),
        tiers=tiers,
        replicas_serving=serving,
        recalibration=recalibration_summary(report),
        learning=learning_summary(deployment),
    )
