"""What one replica counts of a key's spend: amounts in nano-USD, reservations and window ledgers.

Amounts are integer nano-USD so counters never drift (``to_nano`` rounds a cost up, ``nano_limit``
a limit down; both remember their last few thousand answers: a key's limit and a route's worst case
recur on every request, and rounding to 3 decimals formats the number). A ``Reservation`` is what
the request path holds between admission and settlement; a ``Ledger`` is this replica's view of one
key in one window, which ``gateway.keys.spend.SpendLimiter`` admits against when Redis cannot be
used and writes back when it answers; a ``Retry`` is a Redis operation to repeat.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from gateway.keys.budget_periods import SpendWindow
from gateway.keys.rate_limits import RateState, RateWindows
from gateway.keys.spend_store import MAX_NANO
from money.charges import NANO_PER_USD


@functools.lru_cache(maxsize=4096)
def to_nano(amount_usd: float) -> int:
    """USD -> integer nano-USD, rounded up (a reservation never under-counts), at most ``MAX_NANO``
    (what a counter holds; an amount that is not a finite number counts as that maximum too)."""
    nano = amount_usd * NANO_PER_USD
    if nano <= 0:
        return 0
    if not nano < MAX_NANO:  # past the largest count, or NaN
        return MAX_NANO
    return min(MAX_NANO, math.ceil(round(nano, 3)))


@dataclass(slots=True)
class Reservation:
    """A reserved amount for one request; settle it exactly once."""

    key_id: str
    window_start: int
    amount_nano: int
    backend: str  # "redis" or "memory"
    settled: bool = field(default=False)
    op_id: str = ""
    epoch: str | None = None  # Redis epoch it was recorded in (backend "redis")
    tokens: int = 0  # worst-case tokens counted in the key's rate-limit windows
    rate_keys: tuple[str, ...] = ()  # those windows (Redis hashes, or the in-process counter's keys)
    rate: RateState | None = None  # the windows' counts after admission (the x-ratelimit-* headers)
    ttl_s: int | None = None  # the spend counter's lifetime (a budget period's; None: the fixed window's)


@dataclass(frozen=True, slots=True)
class KeyUsage:
    """A key's usage view (``SpendLimiter.usage``): its spend window, limit (nano-USD, with any
    rollover; None: no USD limit), spent + reserved nano-USD, rate-limit counts, where they were
    read (``redis``; ``memory``: no Redis; ``replica``: Redis down, this replica's counts) and when."""

    window: SpendWindow
    limit_nano: int | None
    spent_nano: int
    rate: RateState | None
    source: str
    now: float


@dataclass(slots=True)
class Ledger:
    """What this replica knows about one key in one window (nano-USD)."""

    seen: int = 0  # the Redis counter as last reported
    held: int = 0  # reservations admitted in process, not settled yet
    local: int = 0  # settled in process, not in Redis yet (written back when it answers)
    sending: dict[str, int] = field(default_factory=dict)  # write-backs in flight: op_id -> amount
    synced: int = 0  # this replica's settled charges that Redis holds in the current epoch
    expires: float = math.inf  # when Redis forgets the counter (unix seconds)
    ttl_s: int | None = None  # the counter's TTL (write-backs create it with this one)


@dataclass(slots=True)
class Retry:
    """A Redis operation to repeat once Redis answers (finish or cancel of a reservation)."""

    reservation: Reservation
    actual: int
    cancel: bool
    tokens_delta: int = 0  # what the rate-limit windows' tokens change by when it lands


@functools.lru_cache(maxsize=4096)
def nano_limit(usd: float) -> int:
    """A USD limit in nano-USD, rounded down (a limit is never exceeded by rounding)."""
    return min(MAX_NANO, math.floor(round(usd * NANO_PER_USD, 3)))


def ledger_total(ledger: Ledger) -> int:
    """Everything a ledger knows of its window: Redis's count and what this replica counted since."""
    return ledger.seen + ledger.held + ledger.local + sum(ledger.sending.values())


@dataclass(frozen=True, slots=True)
class UsagePlan:
    """What ``SpendLimiter.usages`` (gateway.keys.spend) reads of one key: its window, rate windows,
    limit (nano-USD) and whether its previous period rolls over (up to ``cap``); ``counters``: the
    spend counters to read (the window's, then the previous period's when it rolls over)."""

    window: SpendWindow
    rates: RateWindows | None
    limit: int | None
    rolls_over: bool
    cap: int
    counters: list[str]

    def from_redis(self, spent: list[int], counts: list[list[int]], now: float) -> KeyUsage:
        """The usage from the counters' values and the rate windows' (requests, tokens)."""
        limit = self.limit
        if limit is not None and self.rolls_over:
            limit += min(self.cap, max(0, limit - spent[1]))
        rates = self.rates
        state = RateState(rates, [c[0] for c in counts], [c[1] for c in counts]) if rates else None
        return KeyUsage(self.window, limit, spent[0], state, "redis", now)
