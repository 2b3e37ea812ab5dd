"""Score drift: live confidence scores against the calibration's, per (kind, tier, model).

For every (tier, model) pair the loaded policy's ``score_distribution`` describes (the top
level's for kind ``text``, each kind section's for its kind, ``policies.kinds``), the monitor
keeps per-bin counts of the live scores of the last ``window_s`` seconds in a ring of time
buckets. A scored answer costs one bisect over the bin edges (nine for deciles) and one increment
(``observe``); the Population Stability Index against the calibration's shares is computed only
when Prometheus scrapes (``collect``). Memory is bounded by pairs x buckets x bins, and labels
come only from the policy's tiers and models.

A routed or route-then-cascade tier (``gateway.routing.routed_tiers``) is tracked the same way with the
router's predicted probability in place of a score (``model`` label ``router``), against the bins
calibration recorded in the tier's ``routing.probability``.

Exported (docs/contracts.md#metrics): ``cascade_score_drift_psi{tier, model, kind}`` (NaN while
the window holds fewer than ``min_samples`` scores) and ``cascade_score_drift_samples{tier, model,
kind}``.
A new policy (another ``policy_id``) starts empty windows; a policy without
``score_distribution`` exports neither metric.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import BaseModel, ConfigDict, Field

from policies import Policy
from policies.kinds import TOP_LEVEL_KIND, kind_policy, served_kinds
from policies.score_distribution import bin_index, population_stability_index

# The ``model`` label of a routed tier's router-probability window: a routed or hybrid tier's
# router decides before any score exists, so its predicted probability is what drift watches.
ROUTER_DRIFT_MODEL = "router"
PSI_METRIC = "cascade_score_drift_psi"
SAMPLES_METRIC = "cascade_score_drift_samples"


class DriftConfig(BaseModel):
    """Config section ``drift``: the sliding window of the score drift metric."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window_s: float = Field(900.0, gt=0, description="length of the sliding window, seconds")
    buckets: int = Field(15, ge=1, le=600, description="time buckets the window slides by")
    # Under no drift PSI over b bins is about (b - 1) / n (a chi-square over n): with ten bins and
    # 100 scores that is 0.09, well under the 0.25 alert threshold.
    min_samples: int = Field(100, ge=1, description="fewer scores in the window: PSI is NaN")


@dataclass
class _Window:
    """Per-bin score counts of one (kind, tier, model) in a ring of time buckets."""

    edges: list[float]
    expected: list[float]
    counts: list[list[int]]  # [bucket][bin]
    slots: list[int]  # the time slot each bucket currently holds (-1: never used)


class ScoreDriftMonitor(Collector):
    """Sliding-window score histograms per (kind, tier, model) and their PSI, as a Prometheus collector."""

    def __init__(self, config: DriftConfig | None = None, clock: Callable[[], float] = time.monotonic):
        """``clock``: seconds, monotonic (injectable so tests can move time)."""
        self.config = config or DriftConfig()
        self._clock = clock
        self._bucket_s = self.config.window_s / self.config.buckets
        self._policy_id: str | None = None
        self._windows: dict[tuple[str, str, str], _Window] = {}

    def reset(self, policy: Policy | None) -> None:
        """Track ``policy``'s pairs with empty windows, unless it is the policy already tracked."""
        policy_id = policy.policy_id if policy is not None else None
        if policy_id == self._policy_id:
            return
        self._policy_id = policy_id
        self._windows = {}
        if policy is None:
            return
        for kind in served_kinds(policy):
            served = kind_policy(policy, kind)
            distribution = served.score_distribution
            for tier, per_model in (distribution.tiers if distribution is not None else {}).items():
                for model, expected in per_model.items():
                    assert distribution is not None
                    self._track(kind, tier, model, distribution.models[model].edges, expected)
            for tier, spec in served.tiers.items():
                bins = spec.routing.probability if spec.routing is not None else None
                if bins is not None:  # the router's predicted probability, in place of a score
                    self._track(kind, tier, ROUTER_DRIFT_MODEL, bins.edges, bins.proportions)

    def _track(self, kind: str, tier: str, model: str, edges: list[float], expected: list[float]) -> None:
        n = self.config.buckets
        self._windows[(kind, tier, model)] = _Window(
            list(edges), list(expected), [[0] * (len(edges) + 1) for _ in range(n)], [-1] * n
        )

    def observe(
        self, policy_id: str, tier: str, model: str, score: float, kind: str = TOP_LEVEL_KIND
    ) -> None:
        """Count one live score of ``model`` in ``tier`` for a request of ``kind`` (ignored for
        another policy or an untracked triple)."""
        if policy_id != self._policy_id or not math.isfinite(score):
            return
        window = self._windows.get((kind, tier, model))
        if window is None:
            return
        slot = int(self._clock() // self._bucket_s)
        i = slot % self.config.buckets
        if window.slots[i] != slot:
            # This bucket last held a slot that has slid out of the window: start it afresh.
            window.counts[i] = [0] * len(window.expected)
            window.slots[i] = slot
        window.counts[i][bin_index(window.edges, score)] += 1

    def window_counts(self, tier: str, model: str, kind: str = TOP_LEVEL_KIND) -> list[int] | None:
        """Per-bin counts of the current window of one triple (None if it is not tracked)."""
        window = self._windows.get((kind, tier, model))
        if window is None:
            return None
        oldest = int(self._clock() // self._bucket_s) - self.config.buckets + 1
        totals = [0] * len(window.expected)
        for slot, counts in zip(window.slots, window.counts, strict=True):
            if slot >= oldest:
                totals = [a + b for a, b in zip(totals, counts, strict=True)]
        return totals

    def windows(self) -> Iterator[tuple[tuple[str, str, str], list[float], list[float], list[int]]]:
        """``((kind, tier, model), edges, expected shares, live counts)`` of every tracked window."""
        for (kind, tier, model), window in self._windows.items():
            counts = self.window_counts(tier, model, kind) or []
            yield (kind, tier, model), window.edges, window.expected, counts

    def describe(self) -> Iterator[Metric]:
        """The two families, without samples (so registering never calls ``collect``)."""
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        """PSI and sample count of every tracked triple over the current window (at scrape time)."""
        psi, samples = self._families()
        for (kind, tier, model), window in self._windows.items():
            counts = self.window_counts(tier, model, kind) or []
            n = sum(counts)
            value = math.nan
            if n >= self.config.min_samples:
                value = population_stability_index(counts, window.expected)
            psi.add_metric([tier, model, kind], value)
            samples.add_metric([tier, model, kind], n)
        yield psi
        yield samples

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        psi = GaugeMetricFamily(
            PSI_METRIC,
            "PSI of live confidence scores (sliding window) against the calibration's; "
            "NaN below min_samples.",
            labels=["tier", "model", "kind"],
        )
        samples = GaugeMetricFamily(
            SAMPLES_METRIC, "Live confidence scores in the drift window.", labels=["tier", "model", "kind"]
        )
        return psi, samples
