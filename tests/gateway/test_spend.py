"""Spend limits: atomic reservations across replicas (real Redis), settlement, windows, fallback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.keys.auth import ClientIdentity
from gateway.keys.ledger import NANO_PER_USD, to_nano
from gateway.keys.spend import SpendLimiter
from gateway.keys.spend_store import MAX_NANO
from gateway.wire.errors import BudgetExceededError, SpendUnavailableError
from tests.support.shared_redis import REDIS_URL, RedisLink, delete_prefix

COST = 0.0012  # worst-case cost of one request, USD
TEN_REQUESTS = ClientIdentity(key_id="k-ten", limit_usd=10 * COST)


@pytest.fixture
async def replicas(keys) -> Any:
    """Two limiters with their own Redis clients, as two gateway replicas would have."""
    clients = [aioredis.from_url(REDIS_URL, decode_responses=True) for _ in range(2)]
    limiters = [SpendLimiter(window_s=3600, redis=c, keys=keys, timeout_s=2.0) for c in clients]
    for limiter in limiters:
        await limiter.maintain()  # learn the spend epoch, as the app does at start
    yield limiters
    for client in clients:
        await client.aclose()


async def attempt(limiter: SpendLimiter, identity: ClientIdentity, amount: float) -> Any:
    try:
        return await limiter.reserve(identity, amount)
    except BudgetExceededError as exc:
        return exc


async def test_fifty_concurrent_reservations_across_two_replicas_admit_exactly_ten(replicas) -> None:
    results = await asyncio.gather(*(attempt(replicas[i % 2], TEN_REQUESTS, COST) for i in range(50)))
    admitted = [r for r in results if not isinstance(r, BudgetExceededError)]
    refused = [r for r in results if isinstance(r, BudgetExceededError)]
    assert len(admitted) == 10 and len(refused) == 40
    assert {r.backend for r in admitted} == {"redis"}
    assert await replicas[0].spent_usd("k-ten") == pytest.approx(10 * COST)


async def test_settling_below_the_reservation_releases_the_difference(replicas) -> None:
    first = [await replicas[0].reserve(TEN_REQUESTS, COST) for _ in range(10)]
    with pytest.raises(BudgetExceededError):
        await replicas[1].reserve(TEN_REQUESTS, COST)
    for reservation in first:  # each request actually cost half its worst case
        await replicas[1].settle(reservation, COST / 2)
    assert await replicas[0].spent_usd("k-ten") == pytest.approx(5 * COST)
    results = await asyncio.gather(*(attempt(replicas[i % 2], TEN_REQUESTS, COST) for i in range(20)))
    assert sum(not isinstance(r, BudgetExceededError) for r in results) == 5


async def test_settle_is_idempotent_and_may_charge_more_than_reserved(replicas) -> None:
    reservation = await replicas[0].reserve(TEN_REQUESTS, COST)
    await replicas[0].settle(reservation, 3 * COST)
    await replicas[0].settle(reservation, 0.0)  # a second settle changes nothing
    assert await replicas[0].spent_usd("k-ten") == pytest.approx(3 * COST)


async def test_budget_error_is_a_429_with_retry_after(replicas) -> None:
    identity = ClientIdentity(key_id="k-small", limit_usd=0.001)
    with pytest.raises(BudgetExceededError) as caught:
        await replicas[0].reserve(identity, 0.002)
    error = caught.value
    assert error.status == 429
    assert error.body()["error"]["type"] == "insufficient_quota"
    assert error.body()["error"]["code"] == "budget_exceeded"
    assert 1 <= int(error.headers["Retry-After"]) <= 3600


async def test_counters_expire_after_their_window(replicas, keys, async_redis) -> None:
    await replicas[0].reserve(TEN_REQUESTS, COST)
    counter = keys.spend("k-ten", replicas[0].window_start())
    ttl = await async_redis.ttl(counter)
    assert 3600 < ttl <= 3600 + 300


async def test_a_new_window_starts_from_zero() -> None:
    now = [1_000_000.0]
    limiter = SpendLimiter(window_s=60, clock=lambda: now[0])
    for _ in range(10):
        await limiter.reserve(TEN_REQUESTS, COST)
    with pytest.raises(BudgetExceededError):
        await limiter.reserve(TEN_REQUESTS, COST)
    now[0] += 60
    assert await limiter.reserve(TEN_REQUESTS, COST) is not None


async def test_in_process_limiter_admits_exactly_ten_of_fifty_concurrent() -> None:
    limiter = SpendLimiter(window_s=3600)
    results = await asyncio.gather(*(attempt(limiter, TEN_REQUESTS, COST) for _ in range(50)))
    admitted = [r for r in results if not isinstance(r, BudgetExceededError)]
    assert len(admitted) == 10 and {r.backend for r in admitted} == {"memory"}
    for reservation in admitted:
        await limiter.settle(reservation, 0.0)
    assert await limiter.spent_usd("k-ten") == 0.0


async def test_no_key_or_no_limit_reserves_nothing() -> None:
    limiter = SpendLimiter(window_s=3600)
    assert await limiter.reserve(ClientIdentity(key_id=None, limit_usd=1.0), 5.0) is None
    assert await limiter.reserve(ClientIdentity(key_id="k", limit_usd=None), 5.0) is None
    await limiter.settle(None, 1.0)  # no-op


async def test_amounts_are_exact_integers_of_nano_usd() -> None:
    limiter = SpendLimiter(window_s=3600)
    identity = ClientIdentity(key_id="k-exact", limit_usd=0.3)
    for _ in range(3):
        reservation = await limiter.reserve(identity, 0.1)  # 0.1 + 0.1 + 0.1 > 0.3 in floats
        assert reservation.amount_nano == NANO_PER_USD // 10
    with pytest.raises(BudgetExceededError):
        await limiter.reserve(identity, 1e-9)


@pytest.mark.parametrize(
    ("usd", "nano"),
    [
        (0.1, 10**8),
        (-1.0, 0),
        (1e9, 10**18),
        (1e10, MAX_NANO),
        (float("inf"), MAX_NANO),
        (float("nan"), MAX_NANO),
    ],
)
def test_an_amount_is_counted_in_nano_usd_up_to_what_a_redis_integer_holds(usd: float, nano: int) -> None:
    assert to_nano(usd) == nano


async def test_a_charge_past_10_to_14_nano_usd_is_settled_exactly_in_redis(keys, async_redis) -> None:
    fallbacks: list[str] = []
    limiter = SpendLimiter(
        window_s=3600, redis=async_redis, keys=keys, timeout_s=2.0, on_fallback=fallbacks.append
    )
    await limiter.maintain()
    identity = ClientIdentity(key_id="k-huge", limit_usd=1.0)
    reservation = await limiter.reserve(identity, COST)
    # A Lua number prints 10^14 and above with an exponent, which INCRBY refuses.
    charged = 123_456_789.123456789  # USD
    await limiter.settle(reservation, charged)
    counter = keys.spend("k-huge", reservation.window_start)
    assert int(await async_redis.get(counter)) == to_nano(charged) > 10**17
    assert await async_redis.hlen(keys.spend_pending("k-huge", reservation.window_start)) == 0
    assert limiter.unsynced_usd() == 0.0 and not fallbacks
    with pytest.raises(BudgetExceededError):
        await limiter.reserve(identity, COST)


async def test_a_counter_saturates_at_the_largest_redis_integer(keys, async_redis) -> None:
    fallbacks: list[str] = []
    limiter = SpendLimiter(
        window_s=3600, redis=async_redis, keys=keys, timeout_s=2.0, on_fallback=fallbacks.append
    )
    await limiter.maintain()
    identity = ClientIdentity(key_id="k-max", limit_usd=1.0)
    first, second = [await limiter.reserve(identity, COST) for _ in range(2)]
    await limiter.settle(first, 1e10)  # past what a counter holds: counted as the maximum
    await limiter.settle(second, 5e9)  # would overflow the counter: it stays at the maximum
    counter = keys.spend("k-max", first.window_start)
    assert int(await async_redis.get(counter)) == MAX_NANO
    assert limiter.unsynced_usd() == 0.0 and not fallbacks


async def test_a_settlement_redis_refuses_is_logged_with_redis_error(keys, async_redis, caplog) -> None:
    limiter = SpendLimiter(window_s=3600, redis=async_redis, keys=keys, timeout_s=2.0)
    await limiter.maintain()
    reservation = await limiter.reserve(ClientIdentity(key_id="k-wrong", limit_usd=1.0), COST)
    counter = keys.spend("k-wrong", reservation.window_start)
    await async_redis.delete(counter)
    await async_redis.hset(counter, "x", "1")  # a counter of the wrong type: Redis refuses the script
    with caplog.at_level("WARNING", logger="cascade.gateway"):
        await limiter.settle(reservation, COST)
    (failure,) = [r for r in caplog.records if r.getMessage() == "spend_store_failed"]
    assert failure.levelname == "ERROR"
    assert failure.fields["operation"] == "settle"  # type: ignore[attr-defined]
    assert "WRONGTYPE" in failure.fields["error"]  # type: ignore[attr-defined]


async def test_redis_outage_falls_back_to_in_process_enforcement(keys) -> None:
    link = RedisLink()
    await link.up()
    client = aioredis.from_url(
        link.url, decode_responses=True, socket_connect_timeout=0.5, socket_timeout=0.5
    )
    statuses: list[bool] = []
    fallbacks: list[str] = []
    limiter = SpendLimiter(
        window_s=3600, redis=client, keys=keys, on_redis_status=statuses.append, on_fallback=fallbacks.append
    )
    try:
        assert (await limiter.reserve(TEN_REQUESTS, COST)).backend == "redis"
        await link.down()
        results = [await attempt(limiter, TEN_REQUESTS, COST) for _ in range(12)]
        admitted = [r for r in results if not isinstance(r, BudgetExceededError)]
        # In process it counts on from what Redis last said (one reservation): nine more fit.
        assert len(admitted) == 9 and {r.backend for r in admitted} == {"memory"}
        assert statuses[0] is True and statuses[-1] is False
        # Every reservation fell back: the first found Redis gone, the others did not try it again
        # within the second (a dead Redis costs one failed call per second, not one per request).
        assert fallbacks == ["error"] + ["down"] * 11
    finally:
        await client.aclose()
        await link.down()


async def outage_limiter(link: RedisLink, keys: Any, **options: Any) -> tuple[SpendLimiter, Any]:
    client = aioredis.from_url(
        link.url, decode_responses=True, socket_connect_timeout=0.5, socket_timeout=0.5
    )
    return SpendLimiter(window_s=3600, redis=client, keys=keys, timeout_s=0.5, **options), client


async def test_spend_counted_during_an_outage_is_written_back_once_redis_answers(keys, async_redis) -> None:
    link = RedisLink()
    await link.up()
    limiter, client = await outage_limiter(link, keys)
    try:
        await limiter.settle(await limiter.reserve(TEN_REQUESTS, COST), COST / 2)
        await link.down()
        for _ in range(3):
            await limiter.settle(await limiter.reserve(TEN_REQUESTS, COST), COST / 4)
        assert limiter.unsynced_usd() == pytest.approx(3 * COST / 4)
        await link.up()
        await limiter.maintain()
        await limiter.maintain()  # a second round writes nothing twice
        counter = await async_redis.get(keys.spend("k-ten", limiter.window_start()))
        assert int(counter) == round((COST / 2 + 3 * COST / 4) * NANO_PER_USD)
        assert limiter.unsynced_usd() == 0.0
    finally:
        await client.aclose()
        await link.down()


async def test_a_wiped_redis_gets_every_charge_of_the_window_back(keys, async_redis) -> None:
    limiter = SpendLimiter(window_s=3600, redis=async_redis, keys=keys)
    for _ in range(4):
        await limiter.settle(await limiter.reserve(TEN_REQUESTS, COST), COST / 2)
    in_flight = await limiter.reserve(TEN_REQUESTS, COST)
    delete_prefix(keys)  # Redis lost its data (restart without persistence)
    await limiter.maintain()
    await limiter.settle(in_flight, COST / 2)
    await limiter.maintain()
    counter = await async_redis.get(keys.spend("k-ten", limiter.window_start()))
    assert int(counter) == round(5 * COST / 2 * NANO_PER_USD)


async def test_refuse_policy_answers_503_while_redis_is_down(keys) -> None:
    link = RedisLink()
    await link.up()
    fallbacks: list[str] = []
    limiter, client = await outage_limiter(link, keys, on_redis_down="refuse", on_fallback=fallbacks.append)
    try:
        await limiter.reserve(TEN_REQUESTS, COST)
        await link.down()
        with pytest.raises(SpendUnavailableError) as caught:
            await limiter.reserve(TEN_REQUESTS, COST)
        assert caught.value.status == 503 and caught.value.code == "spend_unavailable"
        assert fallbacks == ["refused"]
    finally:
        await client.aclose()
        await link.down()


async def test_outage_share_bounds_what_one_replica_admits_alone(keys) -> None:
    link = RedisLink()
    await link.up()
    limiter, client = await outage_limiter(link, keys, outage_share=0.5)
    try:
        await limiter.reserve(TEN_REQUESTS, COST)  # Redis: 1 of 10 used
        await link.down()
        results = [await attempt(limiter, TEN_REQUESTS, COST) for _ in range(10)]
        # Half of the remaining nine: four whole requests fit in 4.5.
        assert sum(not isinstance(r, BudgetExceededError) for r in results) == 4
    finally:
        await client.aclose()
        await link.down()
