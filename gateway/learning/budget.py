"""The shadow spend cap: at most ``max_shadow_usd_per_hour`` USD in any sliding hour, per replica.

A sample reserves the worst case of its shadow calls before making any (``reserve``); what does not
fit is refused and the sample is dropped, so the cap holds even while calls are in flight. When the
calls are done the reservation is replaced by what they cost (``settle``). Amounts are integer
nano-USD (no float drift in the running total); entries leave the window one hour after they were
reserved. Memory: one entry per sample in the last hour.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

from money.charges import NANO_PER_USD


class Hold:
    """One reservation in the window (settle it with its actual cost)."""

    __slots__ = ("at", "expired", "nano")

    def __init__(self, at: float, nano: int):
        self.at = at
        self.nano = nano
        self.expired = False


class ShadowBudget:
    """Reservations and settled spend of shadow calls over a sliding window."""

    def __init__(
        self, cap_usd: float, window_s: float = 3600.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """``clock``: monotonic seconds (injectable so tests can move time)."""
        self.cap_nano = math.floor(cap_usd * NANO_PER_USD)
        self.window_s = window_s
        self._clock = clock
        self._entries: deque[Hold] = deque()
        self._total_nano = 0

    def spent_usd(self) -> float:
        """Reserved plus settled USD inside the window now."""
        self._expire()
        return self._total_nano / NANO_PER_USD

    def reserve(self, usd: float) -> Hold | None:
        """Hold ``usd`` (a worst case) if the window has room for it; None when it would pass the cap."""
        self._expire()
        nano = math.ceil(max(0.0, usd) * NANO_PER_USD)
        if self._total_nano + nano > self.cap_nano:
            return None
        entry = Hold(self._clock(), nano)
        self._entries.append(entry)
        self._total_nano += nano
        return entry

    def settle(self, entry: Hold, usd: float) -> None:
        """Replace a reservation by the actual cost (an upstream that ignores the cap may exceed it)."""
        nano = math.ceil(max(0.0, usd) * NANO_PER_USD)
        if not entry.expired:
            self._total_nano += nano - entry.nano
        entry.nano = nano

    def _expire(self) -> None:
        horizon = self._clock() - self.window_s
        while self._entries and self._entries[0].at <= horizon:
            entry = self._entries.popleft()
            entry.expired = True
            self._total_nano -= entry.nano
