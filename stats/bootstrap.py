"""Percentile bootstrap intervals of many per-query means at once, paired across columns.

Every column of ``values`` (n queries x M columns) is resampled with the *same* draw of queries,
so a column holding a per-query difference (new policy minus current) gets the paired interval of
that difference, and all intervals come from one set of resamples. A resample is a vector of
multinomial counts over the n queries; its means are one matrix product, so B resamples cost
O(B n M) arithmetic and O(chunk n) memory, without a Python loop over resamples.

Shared by ``cascade recalibrate`` (paired intervals of a new policy against the served one,
calibration.recalibration.compare) and ``cascade replay`` (the interval of a mean that is not a
0/1 rate), so the two report intervals computed the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Counts rows materialized at once: bounds the (chunk x n) matrix to about 16 MB of float64.
_CELLS_PER_CHUNK = 2_000_000


@dataclass(frozen=True)
class Intervals:
    """Per column: the sample mean and the bootstrap percentile interval, each ``(M,)``."""

    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray


def bootstrap_means(
    values: np.ndarray,
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int | np.random.SeedSequence = 0,
) -> Intervals:
    """Means of the columns of ``values`` ``(n, M)`` with ``confidence`` percentile intervals.

    Deterministic in ``seed``. The interval of column j is the (1 - confidence)/2 and
    (1 + confidence)/2 quantiles of its mean over ``resamples`` resamples of the n rows.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or values.shape[0] == 0:
        raise ValueError("bootstrap_means needs an (n, M) array with n >= 1")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    n = values.shape[0]
    rng = np.random.default_rng(seed)
    chunk = max(1, _CELLS_PER_CHUNK // n)
    means = np.empty((resamples, values.shape[1]))
    uniform = np.full(n, 1.0 / n)
    for start in range(0, resamples, chunk):  # a loop over chunks of resamples, each one product
        size = min(chunk, resamples - start)
        counts = rng.multinomial(n, uniform, size=size).astype(np.float64)
        means[start : start + size] = np.einsum("bn,nm->bm", counts, values) / n
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail], axis=0)
    return Intervals(values.mean(axis=0), low, high)
