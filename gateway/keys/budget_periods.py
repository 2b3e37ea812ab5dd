"""Which spend window a request of a key counts in: the fixed window, or the key's budget period.

A key's USD limit applies per window; the window's start is part of the spend counter's name
(``{prefix}:spend:{key_id}:{start}``), so a new window is a new counter and nothing has to reset
anything (no cron job: the first request of a new period simply counts in a new key, and the old
one expires).

* A key without a ``BudgetPeriod`` (every key made before periods existed) keeps the fixed window of
  ``budgets.window_s`` seconds aligned to the unix epoch (UTC), unchanged.
* ``daily`` / ``weekly`` (Monday 00:00) / ``monthly`` (the 1st, 00:00) start at local midnight in the
  period's IANA ``timezone`` (daylight saving time included: a day may be 23 or 25 hours long).
* ``none``: one window that never ends (start 0; its counter never expires in practice).

Rollover: with ``rollover_cap_usd``, a period's limit grows by the previous period's unused limit
(its limit minus its spend, at least 0), at most the cap. The previous period's counter is kept
for one more period for that (its TTL covers the next period) and read in the reservation's own
script. A key created during the previous period gets no rollover from it.
"""

from __future__ import annotations

import math
from datetime import date, datetime, timedelta
from typing import NamedTuple
from zoneinfo import ZoneInfo

from gateway.config.key_settings import BudgetPeriod

# Counters outlive their window a little so a late settlement still finds them.
TTL_MARGIN_S = 300
# The window of period "none": it never ends (about 146 billion years from the epoch).
NEVER = 2**62
# A "none" period's counter: ten years without a request before Redis forgets it.
NONE_TTL_S = 10 * 365 * 86400


class SpendWindow(NamedTuple):
    """One spend window: [start, end) in unix seconds, the counter's TTL when created, and the
    previous window's start when its unused limit rolls over (None: no rollover)."""

    start: int
    end: int
    ttl_s: int
    previous_start: int | None = None


def fixed_window(now: float, window_s: int) -> SpendWindow:
    """The fixed window of ``window_s`` seconds containing ``now`` (UTC aligned)."""
    start = int(now // window_s) * window_s
    return SpendWindow(start, start + window_s, window_s + TTL_MARGIN_S)


def period_bounds(period: BudgetPeriod, now: float) -> tuple[int, int]:
    """[start, end) in unix seconds of the period containing ``now``."""
    if period.kind == "none":
        return 0, NEVER
    zone = ZoneInfo(period.timezone)
    today = datetime.fromtimestamp(now, zone).date()
    if period.kind == "daily":
        first, following = today, today + timedelta(days=1)
    elif period.kind == "weekly":
        first = today - timedelta(days=today.weekday())
        following = first + timedelta(days=7)
    else:
        first = today.replace(day=1)
        following = date(first.year + first.month // 12, first.month % 12 + 1, 1)
    return _midnight(first, zone), _midnight(following, zone)


class PeriodClock:
    """``SpendWindow`` of a period at a time, cached per (kind, timezone, rollover) until it ends."""

    def __init__(self) -> None:
        # Keyed by the period's values (hashing the pydantic model itself costs microseconds).
        self._cache: dict[tuple[str, str, float | None], SpendWindow] = {}

    def window(self, period: BudgetPeriod, now: float, created_at: float | None = None) -> SpendWindow:
        """The period's window containing ``now``; a key created after the previous period began
        (``created_at``) gets no rollover from it."""
        slot = (period.kind, period.timezone, period.rollover_cap_usd)
        cached = self._cache.get(slot)
        if cached is None or not cached.start <= now < cached.end:
            if len(self._cache) > 1000:
                self._cache.clear()  # bounded: periods are few (kinds x time zones in use)
            cached = self._cache[slot] = _period_window(period, now)
        if (
            cached.previous_start is not None
            and created_at is not None
            and created_at > cached.previous_start
        ):
            return SpendWindow(cached.start, cached.end, cached.ttl_s, None)
        return cached


def _period_window(period: BudgetPeriod, now: float) -> SpendWindow:
    start, end = period_bounds(period, now)
    if period.kind == "none":
        return SpendWindow(0, NEVER, NONE_TTL_S)
    ttl = end - start + TTL_MARGIN_S
    previous = None
    if period.rollover_cap_usd:
        # The counter must outlive the next period too: that period reads it for its rollover.
        ttl += period_bounds(period, end)[1] - end
        previous = period_bounds(period, start - 1)[0]
    return SpendWindow(start, end, ttl, previous)


def _midnight(day: date, zone: ZoneInfo) -> int:
    return math.floor(datetime(day.year, day.month, day.day, tzinfo=zone).timestamp())
