"""Budget periods: daily, weekly and monthly windows in a time zone, reset by nothing but the
counter's name (real Redis, two limiters as two replicas, an injected clock), capped rollover, and
keys without a period keeping the fixed window."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis.asyncio as aioredis

from gateway.config.key_settings import BudgetPeriod
from gateway.keys.auth import ClientIdentity
from gateway.keys.budget_periods import PeriodClock, fixed_window, period_bounds
from gateway.keys.spend import SpendLimiter
from gateway.wire.errors import BudgetExceededError
from tests.support.shared_redis import REDIS_URL

BERLIN = ZoneInfo("Europe/Berlin")


def at(*args: int, zone: ZoneInfo = BERLIN) -> float:
    return datetime(*args, tzinfo=zone).timestamp()  # type: ignore[misc]


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("kind", "now", "start", "end"),
    [
        ("daily", at(2026, 3, 29, 12), at(2026, 3, 29), at(2026, 3, 30)),  # a 23-hour day (DST starts)
        ("daily", at(2026, 10, 25, 1), at(2026, 10, 25), at(2026, 10, 26)),  # a 25-hour day
        ("weekly", at(2026, 12, 31, 23, 59), at(2026, 12, 28), at(2027, 1, 4)),  # Monday to Monday
        ("monthly", at(2026, 12, 31, 23, 59, 59), at(2026, 12, 1), at(2027, 1, 1)),
        ("monthly", at(2027, 2, 1), at(2027, 2, 1), at(2027, 3, 1)),
    ],
)
def test_periods_start_at_local_midnight_in_their_time_zone(
    kind: str, now: float, start: float, end: float
) -> None:
    assert period_bounds(BudgetPeriod(kind=kind, timezone="Europe/Berlin"), now) == (start, end)


def test_a_day_in_berlin_is_not_a_utc_day() -> None:
    utc_midnight = at(2026, 6, 1, zone=ZoneInfo("UTC"))
    assert (
        period_bounds(BudgetPeriod(kind="daily", timezone="Europe/Berlin"), utc_midnight)[0]
        == utc_midnight - 2 * 3600
    )
    assert period_bounds(BudgetPeriod(kind="none"), utc_midnight) == (0, 2**62)
    assert fixed_window(utc_midnight + 5, 86400).start == utc_midnight  # no period: the fixed window


def test_a_period_needs_a_known_zone_and_rollover_needs_an_end() -> None:
    with pytest.raises(ValueError, match="unknown time zone"):
        BudgetPeriod(kind="daily", timezone="Mars/Olympus")
    with pytest.raises(ValueError, match="rollover"):
        BudgetPeriod(kind="none", rollover_cap_usd=1.0)


@pytest.fixture
async def replicas(keys: Any) -> Any:
    """Two limiters with their own Redis clients and one injected clock (just before a Berlin month ends)."""
    clock = Clock(at(2026, 11, 30, 23, 59, 59))
    clients = [aioredis.from_url(REDIS_URL, decode_responses=True) for _ in range(2)]
    limiters = [SpendLimiter(window_s=3600, redis=c, keys=keys, timeout_s=2.0, clock=clock) for c in clients]
    for limiter in limiters:
        await limiter.maintain()
    yield limiters, clock
    for client in clients:
        await client.aclose()


async def spend(limiter: SpendLimiter, identity: ClientIdentity, usd: float) -> bool:
    """Reserve and settle ``usd``; False when the budget refused it."""
    try:
        reservation = await limiter.reserve(identity, usd)
    except BudgetExceededError:
        return False
    await limiter.settle(reservation, usd)
    return True


MONTHLY = ClientIdentity("k-month", 1.0, period=BudgetPeriod(kind="monthly", timezone="Europe/Berlin"))


async def test_a_monthly_budget_rolls_over_at_its_boundary_and_the_key_serves_again(
    replicas, keys, async_redis
) -> None:
    (a, b), clock = replicas
    assert [await spend([a, b][i % 2], MONTHLY, 0.25) for i in range(5)] == [True] * 4 + [False]
    with pytest.raises(BudgetExceededError) as refused:
        await b.reserve(MONTHLY, 0.01)
    assert refused.value.headers["Retry-After"] == "1"  # one second to the Berlin month's end
    assert "monthly (Europe/Berlin) period" in refused.value.message
    november = int(at(2026, 11, 1))
    assert int(await async_redis.get(keys.spend("k-month", november))) == 10**9
    assert await async_redis.ttl(keys.spend("k-month", november)) > 0  # expires by itself: no cron

    clock.now = at(2026, 12, 1)  # the boundary: December is a new counter
    assert await spend(b, MONTHLY, 0.25) and await spend(a, MONTHLY, 0.5)
    assert int(await async_redis.get(keys.spend("k-month", int(at(2026, 12, 1))))) == 750_000_000
    assert int(await async_redis.get(keys.spend("k-month", november))) == 10**9  # November untouched


async def test_unused_budget_rolls_over_up_to_its_cap(replicas) -> None:
    (a, b), clock = replicas
    period = BudgetPeriod(kind="daily", timezone="Europe/Berlin", rollover_cap_usd=0.3)
    daily = ClientIdentity("k-roll", 1.0, period=period, created_at=at(2026, 11, 1))
    assert await spend(a, daily, 0.5)  # November 30th: 0.5 of 1.0 unused
    clock.now = at(2026, 12, 1, 8)
    # December 1st's limit is 1.0 + min(0.3, 0.5) = 1.3.
    assert [await spend([a, b][i % 2], daily, 0.1) for i in range(14)] == [True] * 13 + [False]
    clock.now = at(2026, 12, 2, 8)
    # December 2nd: all of the 1.0 was used the day before (1.3 spent): no rollover.
    assert [await spend(b, daily, 0.1) for _ in range(11)] == [True] * 10 + [False]


async def test_a_key_created_in_the_previous_period_gets_no_rollover(replicas) -> None:
    (a, _), clock = replicas
    clock.now = at(2026, 12, 1, 8)
    period = BudgetPeriod(kind="daily", timezone="Europe/Berlin", rollover_cap_usd=0.3)
    young = ClientIdentity("k-young", 1.0, period=period, created_at=at(2026, 11, 30, 12))
    assert [await spend(a, young, 0.1) for _ in range(11)] == [True] * 10 + [False]


async def test_period_none_never_resets_and_keys_without_a_period_keep_the_fixed_window(replicas) -> None:
    (a, _), clock = replicas
    forever = ClientIdentity("k-none", 0.2, period=BudgetPeriod(kind="none"))
    fixed = ClientIdentity("k-fixed", 0.2)
    assert await spend(a, forever, 0.2) and await spend(a, fixed, 0.2)
    clock.now += 400 * 86400
    assert not await spend(a, forever, 0.01)
    assert await spend(a, fixed, 0.2)


async def test_without_redis_periods_and_rollover_count_in_process() -> None:
    clock = Clock(at(2026, 11, 30, 12))
    limiter = SpendLimiter(window_s=3600, clock=clock)
    period = BudgetPeriod(kind="daily", timezone="Europe/Berlin", rollover_cap_usd=0.3)
    # Created on November 29th: no rollover into the 30th, the 30th rolls over into December.
    daily = ClientIdentity("k-local", 1.0, period=period, created_at=at(2026, 11, 29, 12))
    assert await spend(limiter, daily, 0.9)
    assert not await spend(limiter, daily, 0.2)
    clock.now = at(2026, 12, 1, 0, 0, 1)
    assert [await spend(limiter, daily, 0.1) for _ in range(12)] == [True] * 11 + [False]  # 1.0 + 0.1


def test_the_period_window_is_cached_until_it_ends() -> None:
    clock = PeriodClock()
    period = BudgetPeriod(kind="weekly", timezone="America/New_York")
    first = clock.window(period, at(2026, 6, 3, zone=ZoneInfo("America/New_York")))
    assert clock.window(period, first.end - 1) is first
    assert clock.window(period, first.end).start == first.end
