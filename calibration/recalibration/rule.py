"""The push rule of ``cascade recalibrate``: is the new policy not worse than the current, within noise?

All numbers are measured on the held-out queries; ``[low, high]`` is the bootstrap interval and
differences are paired (new minus current on the same resampled queries). With tolerances
``eps_q`` (absolute quality, default 0.01) and ``eps_c`` (relative cost, default 0.05), a tier of
the new policy FAILS when (docs/contracts.md, "Recalibration"):

* budget tier (``max_cost_usd`` B):
  - quality: the new is worse beyond noise and tolerance: high(dq) < 0 and dq < -eps_q;
  - cost: the new is over budget beyond noise and tolerance, low(c_new) > B (1 + eps_c), and
    costlier than the current beyond noise, low(dc) > 0 (a current that overruns as much is no better);
* quality tier (``min_quality`` Q):
  - quality: the new misses the target beyond noise and tolerance, high(q_new) < Q - eps_q, and is
    worse than the current as in a budget tier (a current that overshoots Q may be beaten by a
    cheaper new route that still reaches Q);
  - cost: the new is costlier beyond noise and tolerance, low(dc) > 0 and dc > eps_c c_cur, while
    the current reaches its target within noise, high(q_cur) >= Q - eps_q (paying more to reach a
    target the current misses is allowed).

A tier the current policy does not have is compared with "none" and passes. Escalation rates are
reported, not judged (cost carries their price).
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.schema import Objective


@dataclass(frozen=True)
class Estimate:
    """A held-out mean and its bootstrap interval."""

    mean: float
    low: float
    high: float

    def as_dict(self) -> dict[str, float]:
        """``{"mean", "low", "high"}``."""
        return {"mean": self.mean, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class TierMetrics:
    """Quality, cost per query (USD) and escalation rate of one tier (or their paired differences)."""

    quality: Estimate
    cost_usd: Estimate
    escalation_rate: Estimate

    def as_dict(self) -> dict[str, dict[str, float]]:
        """Each metric as ``{"mean", "low", "high"}``."""
        return {
            "quality": self.quality.as_dict(),
            "cost_usd": self.cost_usd.as_dict(),
            "escalation_rate": self.escalation_rate.as_dict(),
        }


@dataclass(frozen=True)
class Tolerances:
    """``quality``: absolute quality slack; ``cost``: relative cost slack."""

    quality: float = 0.01
    cost: float = 0.05


@dataclass(frozen=True)
class Check:
    """One criterion of one tier: its name (``quality``, ``cost``, ``compared``), verdict and why."""

    name: str
    ok: bool
    detail: str


def check_tier(
    objective: Objective,
    new: TierMetrics,
    current: TierMetrics | None,
    difference: TierMetrics | None,
    tolerances: Tolerances,
) -> list[Check]:
    """The checks of one tier (see the module docstring); ``current``/``difference`` None: no current tier."""
    if current is None or difference is None:
        return [Check("compared", True, "no current tier: compared with none")]
    if objective.max_cost_usd is not None:
        return [
            _quality_not_worse(difference, tolerances),
            _within_budget(objective.max_cost_usd, new, difference, tolerances),
        ]
    assert objective.min_quality is not None
    target = objective.min_quality
    quality = _quality_not_worse(difference, tolerances)
    if not quality.ok and new.quality.high >= target - tolerances.quality:
        quality = Check("quality", True, f"reaches min_quality {target:g} within noise ({quality.detail})")
    return [quality, _not_costlier(target, current, difference, tolerances)]


def _quality_not_worse(difference: TierMetrics, tolerances: Tolerances) -> Check:
    dq = difference.quality
    text = f"quality {dq.mean:+.4f} [{dq.low:+.4f}, {dq.high:+.4f}] vs current"
    worse = dq.high < 0 and dq.mean < -tolerances.quality
    return Check(
        "quality", not worse, text + (f", beyond the {tolerances.quality:g} tolerance" if worse else "")
    )


def _within_budget(budget: float, new: TierMetrics, difference: TierMetrics, tolerances: Tolerances) -> Check:
    cost, dc = new.cost_usd, difference.cost_usd
    over = cost.low > budget * (1 + tolerances.cost)
    costlier = dc.low > 0
    text = f"cost ${cost.mean:.4g} [${cost.low:.4g}, ${cost.high:.4g}] for a ${budget:.4g} budget"
    if over and costlier:
        return Check(
            "cost", False, text + f", over it beyond {tolerances.cost:.0%} and costlier than the current"
        )
    return Check("cost", True, text)


def _not_costlier(
    target: float, current: TierMetrics, difference: TierMetrics, tolerances: Tolerances
) -> Check:
    dc = difference.cost_usd
    text = f"cost {dc.mean:+.4g} [{dc.low:+.4g}, {dc.high:+.4g}] USD vs current"
    costlier = dc.low > 0 and dc.mean > tolerances.cost * current.cost_usd.mean
    current_reaches = current.quality.high >= target - tolerances.quality
    if costlier and current_reaches:
        return Check(
            "cost", False, text + f", more than {tolerances.cost:.0%} above a current that reaches {target:g}"
        )
    return Check("cost", True, text)
