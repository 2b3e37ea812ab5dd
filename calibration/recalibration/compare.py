"""The new and the current policy on the same held-out queries: per tier estimates, checks, verdict."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calibration.recalibration.outcomes import TierOutcomes, policy_outcomes
from calibration.recalibration.rule import Check, Estimate, TierMetrics, Tolerances, check_tier
from calibration.runs import RunsMatrix
from policies.schema import Objective, Policy
from stats.bootstrap import bootstrap_means

_METRICS = ("quality", "cost_usd", "escalation_rate")


@dataclass(frozen=True)
class TierComparison:
    """One tier of the new policy against the same tier of the current one (None: no such tier)."""

    name: str
    objective: Objective
    new: TierMetrics
    current: TierMetrics | None
    difference: TierMetrics | None
    checks: list[Check]

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        return all(check.ok for check in self.checks)


@dataclass(frozen=True)
class Comparison:
    """Every tier's comparison, the current tiers the new policy lacks, and the sizes involved."""

    tiers: dict[str, TierComparison]
    dropped_tiers: list[str]
    heldout_queries: int
    resamples: int
    confidence: float
    tolerances: Tolerances

    def refusal(self) -> str | None:
        """One line saying why the new policy must not replace the current one, or None."""
        if self.dropped_tiers:
            return (
                f"the new policy lacks tier(s) {', '.join(self.dropped_tiers)} that the current one serves "
                "(clients naming them would get 400): add them to the tiers file"
            )
        failed = [(t.name, c) for t in self.tiers.values() for c in t.checks if not c.ok]
        if not failed:
            return None
        name, check = failed[0]
        more = f" (and {len(failed) - 1} more check(s))" if len(failed) > 1 else ""
        return f"tier '{name}': {check.detail}{more}"


def _columns(outcomes: TierOutcomes) -> list[np.ndarray]:
    return [outcomes.quality, outcomes.cost, outcomes.escalated]


def _metrics(mean: np.ndarray, low: np.ndarray, high: np.ndarray, start: int) -> TierMetrics:
    estimates = [Estimate(float(mean[i]), float(low[i]), float(high[i])) for i in range(start, start + 3)]
    return TierMetrics(*estimates)


def compare_policies(
    new: Policy,
    new_matrix: RunsMatrix,
    current: Policy | None,
    current_matrix: RunsMatrix | None,
    heldout: np.ndarray,
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    tolerances: Tolerances | None = None,
    seed: int | np.random.SeedSequence = 0,
) -> Comparison:
    """Score both policies on the ``heldout`` rows and apply the push rule (``recalibration.rule``).

    ``new_matrix`` and ``current_matrix`` hold the same queries in the same order (scored with each
    policy's own scorer); ``heldout`` indexes both. One bootstrap serves every tier and metric, so
    each difference is paired.
    """
    tolerances = tolerances or Tolerances()
    new_outcomes = policy_outcomes(new, new_matrix, heldout)
    current_outcomes = (
        {} if current is None or current_matrix is None else policy_outcomes(current, current_matrix, heldout)
    )
    columns: list[np.ndarray] = []
    layout: dict[str, tuple[int, int | None, int | None]] = {}  # tier -> start of new, current, difference
    for name, outcome in new_outcomes.items():
        start_new = len(columns)
        columns += _columns(outcome)
        start_current = start_difference = None
        if name in current_outcomes:
            start_current = len(columns)
            columns += _columns(current_outcomes[name])
            start_difference = len(columns)
            columns += [
                a - b for a, b in zip(_columns(outcome), _columns(current_outcomes[name]), strict=True)
            ]
        layout[name] = (start_new, start_current, start_difference)
    intervals = bootstrap_means(
        np.column_stack(columns), resamples=resamples, confidence=confidence, seed=seed
    )
    tiers = {}
    for name, (start_new, start_current, start_difference) in layout.items():
        bounds = (intervals.mean, intervals.low, intervals.high)
        metrics_new = _metrics(*bounds, start_new)
        metrics_current = None if start_current is None else _metrics(*bounds, start_current)
        difference = None if start_difference is None else _metrics(*bounds, start_difference)
        objective = new.tiers[name].objective
        checks = check_tier(objective, metrics_new, metrics_current, difference, tolerances)
        tiers[name] = TierComparison(name, objective, metrics_new, metrics_current, difference, checks)
    dropped = [] if current is None else [name for name in current.tiers if name not in new.tiers]
    return Comparison(tiers, dropped, int(np.asarray(heldout).size), resamples, confidence, tolerances)
