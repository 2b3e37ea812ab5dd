"""The Tiers page's data: per tier, what the policy promised held out against what it delivers live.

Promised: the tier's ``expected.heldout`` means and spreads (else its in-sample ``expected``, said
so). Live, from the deployment's summed counters (gateway.console.aggregates.deployment): cost per
served request (``cascade_cost_usd`` over ``cascade_requests_total{outcome=accepted|escalated|direct}``,
the population the policy's expectation was computed on, as in deploy/prometheus/rules) and the
escalation rate (``outcome=escalated`` over the same). Live quality exists only where traffic was
labelled: the last recalibration's held-out estimate of the served policy (its report in Redis,
``cascade recalibrate``), else ``None`` ("no labels"). Score histograms are
``cascade_confidence_score`` per scored stage with the stage's threshold; drift is the PSI of the
summed drift windows against the calibration's shares.

Bounds: a tier with ``expected.bounds`` shows them (quality at least ``quality_min``, cost per request
at most ``cost_max``, escalation within ``escalation``, at ``confidence``) and whether the live cost
per request and escalation rate lie inside them. The live figures are point values over the served
requests, not intervals, so below ``BOUNDS_MIN_SERVED`` requests no verdict is given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gateway.console.aggregates.deployment import Deployment, bucket_counts, ratio
from policies import Policy
from policies.kinds import TOP_LEVEL_KIND
from policies.schema import Bounds, Tier
from policies.score_distribution import population_stability_index

SERVED_OUTCOMES = ("accepted", "escalated", "direct")
# Fewer live scores than this in a drift window: its PSI is not shown (as the gateway's metric).
DRIFT_MIN_SAMPLES = 100
# Fewer served requests than this: the live cost and escalation rate are not judged against the bounds.
BOUNDS_MIN_SERVED = 30
INSIDE, OUTSIDE, TOO_FEW = "inside", "outside", "not enough requests"


@dataclass
class Measures:
    """Cost per request (USD), quality and escalation rate; None where unknown. ``spread``: each
    measure's held-out (low, high), when the policy has them."""

    cost_usd: float | None
    quality: float | None
    escalation_rate: float | None
    spread: dict[str, tuple[float, float]] = field(default_factory=dict)


@dataclass
class ScoreHistogram:
    """Live confidence scores of one scored stage: per-bucket (upper bound, count), its threshold."""

    model: str
    buckets: list[tuple[float, float]]
    threshold: float | None

    @property
    def scores(self) -> int:
        """How many live scores the histogram holds."""
        return int(sum(count for _, count in self.buckets))


@dataclass
class Drift:
    """One score-drift window: PSI (None below ``DRIFT_MIN_SAMPLES``) over ``samples`` live scores."""

    model: str
    psi: float | None
    samples: int


@dataclass
class BoundsCheck:
    """A tier's bounds at ``confidence`` and the live point figures against them: ``cost`` and
    ``escalation`` are ``INSIDE``, ``OUTSIDE`` or ``TOO_FEW`` (under ``BOUNDS_MIN_SERVED``
    served requests, or no live figure)."""

    confidence: float
    quality_min: float
    cost_max: float
    escalation: tuple[float, float]
    cost: str
    escalation_verdict: str


@dataclass
class TierView:
    """One tier's row and charts."""

    name: str
    mechanism: str
    routes: list[str]
    promised: Measures
    promised_source: str  # "held out" or "in sample"
    live: Measures
    served: int
    quality_source: str  # where live quality comes from, or "no labels"
    histograms: list[ScoreHistogram]
    drift: list[Drift]
    bounds: BoundsCheck | None = None  # None: the policy was calibrated without bounds


@dataclass
class TiersView:
    """The page: the tiers, the envelope, the tiers' points on it, how many replicas were summed."""

    policy_id: str | None
    tiers: list[TierView]
    envelope: list[dict[str, Any]]
    replicas: int
    redis_error: str | None = None


def mechanism(tier: Tier) -> str:
    """How a tier is served: ``cascade``, ``fallback``, ``routed`` or ``hybrid``."""
    if tier.routing is not None:
        return tier.routing.mechanism
    return tier.mechanism or "cascade"


def route_texts(tier: Tier) -> list[str]:
    """Each route as ``a -> b @ threshold`` (with its weight when there are several)."""
    out = []
    for route in tier.routes:
        text = " -> ".join(route.models)
        if route.thresholds:
            text += " @ " + ", ".join(f"{t:.3g}" for t in route.thresholds)
        out.append(text if len(tier.routes) == 1 else f"{route.weight:.2f} x {text}")
    return out


def _promised(tier: Tier) -> tuple[Measures, str]:
    held = tier.expected.heldout
    if held is None:
        e = tier.expected
        return Measures(e.cost_usd, e.quality, e.escalation_rate), "in sample"
    spread = {
        "cost_usd": (held.cost_usd.low, held.cost_usd.high),
        "quality": (held.quality.low, held.quality.high),
        "escalation_rate": (held.escalation_rate.low, held.escalation_rate.high),
    }
    return Measures(held.cost_usd.mean, held.quality.mean, held.escalation_rate.mean, spread), "held out"


def _verdict(value: float | None, low: float, high: float, served: float) -> str:
    if value is None or served < BOUNDS_MIN_SERVED:
        return TOO_FEW
    return INSIDE if low <= value <= high else OUTSIDE


def bounds_check(bounds: Bounds | None, live: Measures, served: float) -> BoundsCheck | None:
    """``bounds`` with the live cost per request and escalation rate judged against them."""
    if bounds is None:
        return None
    low, high = bounds.escalation
    return BoundsCheck(
        confidence=bounds.confidence,
        quality_min=bounds.quality_min,
        cost_max=bounds.cost_max,
        escalation=(low, high),
        cost=_verdict(live.cost_usd, 0.0, bounds.cost_max, served),
        escalation_verdict=_verdict(live.escalation_rate, low, high, served),
    )


def _labelled_quality(report: dict[str, Any] | None, policy: Policy, tier: str) -> tuple[float | None, str]:
    """The served policy's quality on labelled traffic from the last recalibration report."""
    if report is None:
        return None, "no labels"
    current = report.get("current_policy") or {}
    if current.get("policy_id") != policy.policy_id:
        return None, "no labels (the last recalibration compared another policy)"
    row = (report.get("tiers") or {}).get(tier) or {}
    quality = ((row.get("current") or {}).get("quality") or {}).get("mean")
    if not isinstance(quality, int | float):
        return None, "no labels"
    at = report.get("created_at", "?")
    return float(quality), f"labelled traffic, recalibration of {at}"


def _histograms(deployment: Deployment, name: str, tier: Tier) -> list[ScoreHistogram]:
    """One histogram per scored stage of the tier's first route (its last stage is not scored)."""
    route = tier.routes[0]
    out = []
    for i, model in enumerate(route.models[:-1] if route.thresholds else ()):
        buckets = bucket_counts(deployment.buckets("cascade_confidence_score", tier=name, model=model))
        out.append(ScoreHistogram(model, buckets, route.thresholds[i]))
    return out


def _drift(deployment: Deployment, name: str) -> list[Drift]:
    out = []
    for (kind, tier, model), window in sorted(deployment.drift.items()):
        if kind != TOP_LEVEL_KIND or tier != name:
            continue
        n = sum(window.counts)
        psi = population_stability_index(window.counts, window.expected) if n >= DRIFT_MIN_SAMPLES else None
        out.append(Drift(model, psi if psi is None or math.isfinite(psi) else None, n))
    return out


def tier_view(deployment: Deployment, policy: Policy, name: str, report: dict[str, Any] | None) -> TierView:
    """One tier of ``policy`` against the deployment's live counters."""
    tier = policy.tiers[name]
    promised, source = _promised(tier)
    served = sum(deployment.total("cascade_requests_total", tier=name, outcome=o) for o in SERVED_OUTCOMES)
    escalated = deployment.total("cascade_requests_total", tier=name, outcome="escalated")
    cost = deployment.total("cascade_cost_usd_total", tier=name)
    quality, quality_source = _labelled_quality(report, policy, name)
    live = Measures(ratio(cost, served), quality, ratio(escalated, served))
    return TierView(
        name=name,
        mechanism=mechanism(tier),
        routes=route_texts(tier),
        promised=promised,
        promised_source=source,
        live=live,
        served=int(served),
        quality_source=quality_source,
        histograms=_histograms(deployment, name, tier),
        drift=_drift(deployment, name),
        bounds=bounds_check(tier.expected.bounds, live, served),
    )


def tiers_view(deployment: Deployment, policy: Policy | None, report: dict[str, Any] | None) -> TiersView:
    """The Tiers page of the served ``policy`` (None: no policy, an empty page)."""
    if policy is None:
        return TiersView(None, [], [], deployment.replicas, deployment.redis_error)
    tiers = [tier_view(deployment, policy, name, report) for name in policy.tiers]
    envelope = [
        {"cost_usd": p.cost_usd, "quality": p.quality, "route": " -> ".join(p.models)}
        for p in policy.envelope
    ]
    return TiersView(policy.policy_id, tiers, envelope, deployment.replicas, deployment.redis_error)
