"""A shift alarm over a stream of requests: windowed two-sample chi-square tests of a few categorical
signals against their calibration histograms, combined across signals.

Each request adds one bin index per signal (for the gateway: the cheap stage's score decile and
whether the request escalated, docs/operations.md#shift-alarm). Counts are kept per block of
``window // blocks`` requests in a ring of ``blocks`` blocks, and their running window totals:
``observe`` is a few list increments and no allocation. At the end of each block, once the
window is full (``window`` requests), each signal's window histogram is tested against the
calibration's with the two-sample chi-square test (``stats.chi_square.two_sample_chi_square``),
and the signals' p-values are combined: ``bonferroni`` fires when the smallest is below
``alpha / signals``, ``fisher`` when ``-2 sum(ln p)`` is beyond its chi-square(2 x signals)
quantile at ``alpha``. The test runs every block over overlapping windows, so the false alarm
rate per request is not ``alpha / block``: it is measured (bench/calibration/shift_alarm.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from stats.chi_square import chi_square_critical, chi_square_sf, two_sample_chi_square

Combination = Literal["bonferroni", "fisher"]


class ShiftDetector:
    """One stream's detector (see the module docstring); ``observe`` returns True when it fires."""

    __slots__ = (
        "_block",
        "_block_size",
        "_blocks",
        "_combine",
        "_filled",
        "_in_block",
        "alpha",
        "last_p_values",
        "references",
        "totals",
        "window",
    )

    def __init__(
        self,
        references: Sequence[Sequence[float]],
        window: int,
        blocks: int,
        alpha: float,
        combine: Combination = "bonferroni",
    ):
        """``references``: per signal, the calibration's count per bin (its bins are the indexes
        ``observe`` is given). ``window``: requests tested at once, a multiple of ``blocks``."""
        if not references or any(len(r) < 2 for r in references):
            raise ValueError("every signal needs a reference histogram of at least two bins")
        if blocks < 1 or window < blocks or window % blocks:
            raise ValueError(f"window {window} must be a positive multiple of blocks {blocks}")
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
        self.references = [list(map(float, r)) for r in references]
        self.window = window
        self.alpha = alpha
        self._combine = combine
        self._block_size = window // blocks
        self._blocks = [[[0] * len(r) for r in references] for _ in range(blocks)]
        self.totals = [[0] * len(r) for r in references]
        self._block = 0
        self._in_block = 0
        self._filled = 0  # blocks completed, up to ``blocks``
        self.last_p_values: list[float] = []

    def observe(self, bins: Sequence[int]) -> bool:
        """Count one request (its bin index per signal); True when this request ends a block and
        the window's histograms differ from the calibration's (the alarm fires)."""
        block = self._blocks[self._block]
        totals = self.totals
        for signal, index in enumerate(bins):
            block[signal][index] += 1
            totals[signal][index] += 1
        self._in_block += 1
        if self._in_block < self._block_size:
            return False
        return self._end_block()

    def _end_block(self) -> bool:
        """Test the window if it is full, then drop the oldest block from it."""
        self._in_block = 0
        count = len(self._blocks)
        self._filled = min(count, self._filled + 1)
        fired = self._filled == count and self.shifted()
        self._block = (self._block + 1) % count
        oldest = self._blocks[self._block]  # leaves the window as the next block starts
        if self._filled == count:
            for signal, counts in enumerate(oldest):
                totals = self.totals[signal]
                for index, value in enumerate(counts):
                    totals[index] -= value
                    counts[index] = 0
        return fired

    def shifted(self) -> bool:
        """Whether the current window's histograms reject the calibration's (see the module docstring)."""
        p_values = []
        for live, reference in zip(self.totals, self.references, strict=True):
            statistic, df = two_sample_chi_square(live, reference)
            p_values.append(chi_square_sf(statistic, df) if df > 0 else 1.0)
        self.last_p_values = p_values
        signals = len(p_values)
        if self._combine == "bonferroni":
            return min(p_values) < self.alpha / signals
        fisher = -2.0 * sum(math.log(max(p, 1e-300)) for p in p_values)
        return fisher > chi_square_critical(self.alpha, 2 * signals)

    def reset(self) -> None:
        """Forget every count (an operator cleared the alarm: watch afresh)."""
        for block in self._blocks:
            for counts in block:
                counts[:] = [0] * len(counts)
        for counts in self.totals:
            counts[:] = [0] * len(counts)
        self._block = self._in_block = self._filled = 0
        self.last_p_values = []
