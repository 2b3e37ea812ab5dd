"""Confidence intervals for what a replay measured, and the check against what a policy expects.

* A rate of 0/1 outcomes (quality under an exact grader, escalations) gets a Wilson score interval:
  it stays inside [0, 1] and keeps its coverage at small n and at rates near 0 or 1, where the
  normal approximation does not.
* A mean of anything else (cost per request, fractional grades) gets a percentile bootstrap
  interval (seeded, so a report is reproducible).

The interval is around the *realized* value; ``Estimate.outside`` says whether the policy's
expectation lies outside it (with a float tolerance, so a per-query price that calibration and
the gateway both compute as 0.001 is not flagged for a last-bit difference).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from stats.bootstrap import bootstrap_means

BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 20260101
_REL_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Estimate:
    """A realized mean with its confidence interval, and the policy's expectation if known."""

    realized: float | None
    low: float | None
    high: float | None
    method: str
    expected: float | None = None

    @property
    def outside(self) -> bool | None:
        """True if the expectation lies outside [low, high]; None without an expectation or data."""
        if self.expected is None or self.low is None or self.high is None:
            return None
        tolerance = _REL_TOLERANCE * max(abs(self.expected), abs(self.high), 1e-12)
        return not (self.low - tolerance <= self.expected <= self.high + tolerance)

    def as_dict(self) -> dict[str, Any]:
        """JSON form: realized, low, high, method, expected, outside."""
        return {**asdict(self), "outside": self.outside}


def z_value(confidence: float) -> float:
    """Two-sided standard normal quantile for ``confidence`` (1.96 for 0.95)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson_interval(successes: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion ``successes / n``."""
    if n <= 0:
        raise ValueError("a proportion needs at least one observation")
    z = z_value(confidence)
    p = successes / n
    denominator = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # Exact ends at 0 and n (the formula leaves a rounding residue there).
    low = 0.0 if successes <= 0 else max(0.0, center - half)
    high = 1.0 if successes >= n else min(1.0, center + half)
    return low, high


def bootstrap_mean_interval(
    values: Sequence[float],
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (``stats.bootstrap``, as recalibrate)."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("a mean needs at least one observation")
    if np.all(data == data[0]):
        return float(data[0]), float(data[0])
    intervals = bootstrap_means(data[:, None], resamples=resamples, confidence=confidence, seed=seed)
    low, high = intervals.low[0], intervals.high[0]
    return float(low), float(high)


def is_binary(values: Sequence[float]) -> bool:
    """Every value is exactly 0 or 1."""
    return all(v in (0.0, 1.0) for v in values)


def mean_estimate(values: Sequence[float], confidence: float, expected: float | None = None) -> Estimate:
    """Mean of ``values`` with a Wilson interval when they are 0/1, a bootstrap one otherwise."""
    if not values:
        return Estimate(None, None, None, "none", expected)
    realized = math.fsum(values) / len(values)
    if is_binary(values):
        low, high = wilson_interval(math.fsum(values), len(values), confidence)
        method = "wilson"
    else:
        low, high = bootstrap_mean_interval(values, confidence)
        method = "bootstrap"
    return Estimate(realized, low, high, method, expected)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100, linear interpolation), or None for no values."""
    if not values:
        return None
    return float(np.percentile(np.asarray(values, dtype=float), q))
