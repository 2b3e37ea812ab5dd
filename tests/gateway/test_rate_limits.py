"""Per-key rate limits in the spend reservation's own script (real Redis): requests and tokens per
window, several windows, settlement to the real count, one round trip, in-process without Redis."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.config.key_settings import RateLimit, parse_rate_limit_spec
from gateway.keys.auth import ClientIdentity
from gateway.keys.rate_limits import duration
from gateway.keys.spend import SpendLimiter
from gateway.redis.batch import RedisBatcher
from gateway.wire.errors import BudgetExceededError, RateLimitExceededError
from tests.support.shared_redis import REDIS_URL, RedisLink


class Clock:
    """An injected clock (unix seconds) the test moves."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class CountingBatcher(RedisBatcher):
    """A RedisBatcher that counts the commands and the pipelines (round trips) it sends."""

    def __init__(self, redis: Any, timeout_s: float | None) -> None:
        super().__init__(redis, timeout_s)
        self.commands = 0
        self.round_trips = 0

    async def _pipeline(self, commands: list[Any], replies: list[Any]) -> None:
        self.commands += len(commands)
        self.round_trips += 1
        await super()._pipeline(commands, replies)


RPM_5 = ClientIdentity("k-rpm", None, rate_limits=(RateLimit(window_s=60, requests=5),))
TPM = ClientIdentity("k-tpm", 10.0, rate_limits=(RateLimit(window_s=60, tokens=1000),))


@pytest.fixture
async def clients() -> Any:
    made: list[aioredis.Redis] = []

    def make() -> aioredis.Redis:
        made.append(aioredis.from_url(REDIS_URL, decode_responses=True))
        return made[-1]

    yield make
    for client in made:
        await client.aclose()


async def limiters(keys: Any, clients: Any, clock: Clock, n: int = 2) -> list[SpendLimiter]:
    out = [
        SpendLimiter(window_s=3600, redis=clients(), keys=keys, timeout_s=2.0, clock=clock) for _ in range(n)
    ]
    for limiter in out:
        await limiter.maintain()
    return out


async def attempt(
    limiter: SpendLimiter, identity: ClientIdentity, usd: float = 0.001, tokens: int = 0
) -> Any:
    try:
        return await limiter.reserve(identity, usd, tokens)
    except (RateLimitExceededError, BudgetExceededError) as exc:
        return exc


async def test_a_request_limit_admits_exactly_its_count_across_replicas_and_resets_with_the_window(
    keys, clients
) -> None:
    clock = Clock(1_800_000_000.0)  # a window start: 1_800_000_000 is a multiple of 60
    replicas = await limiters(keys, clients, clock)
    results = await asyncio.gather(*(attempt(replicas[i % 2], RPM_5) for i in range(40)))
    refused = [r for r in results if isinstance(r, RateLimitExceededError)]
    assert len(results) - len(refused) == 5 and len(refused) == 35
    error = refused[0]
    assert error.status == 429 and error.type == "requests" and error.code == "rate_limit_exceeded"
    assert error.headers["Retry-After"] == "60"
    assert error.headers["x-ratelimit-limit-requests"] == "5"
    assert error.headers["x-ratelimit-remaining-requests"] == "0"
    assert error.headers["x-ratelimit-reset-requests"] == "1m0s"
    clock.now += 60  # the next window is a new counter: the key serves again
    assert not isinstance(await attempt(replicas[0], RPM_5), RateLimitExceededError)


async def test_tokens_reserve_the_worst_case_and_settle_to_the_real_count(keys, clients, async_redis) -> None:
    clock = Clock(1_800_000_000.0)
    (limiter,) = await limiters(keys, clients, clock, 1)
    first = await limiter.reserve(TPM, 0.001, 600)
    assert first is not None and first.rate is not None and first.rate.tokens == [600]
    # Room is left (600 < 1000): admitted, and the window passes its limit by this one request.
    second = await limiter.reserve(TPM, 0.001, 600)
    assert second is not None and second.rate is not None and second.rate.tokens == [1200]
    refused = await attempt(limiter, TPM, tokens=1)
    assert isinstance(refused, RateLimitExceededError) and refused.type == "tokens"
    assert refused.headers["x-ratelimit-remaining-tokens"] == "0"
    await limiter.settle(first, 0.0005, tokens=100)
    await limiter.settle(second, 0.0005, tokens=150)
    await limiter.settle(second, 0.0005, tokens=150)  # a repeated settlement changes nothing
    window = int(clock.now // 60) * 60
    assert await async_redis.hgetall(keys.rate("k-tpm", 60, window)) == {"r": "2", "t": "250"}
    third = await limiter.reserve(TPM, 0.001, 600)
    assert third is not None and third.rate is not None and third.rate.tokens == [850]
    headers = dict(limiter.rate_headers(third))
    assert headers[b"x-ratelimit-remaining-tokens"] == b"150"


async def test_every_window_of_a_key_must_admit_and_the_binding_one_is_reported(keys, clients) -> None:
    clock = Clock(1_800_000_000.0 + 30)
    identity = ClientIdentity(
        "k-multi",
        None,
        rate_limits=(RateLimit(window_s=60, requests=3), RateLimit(window_s=3600, requests=4, tokens=10_000)),
    )
    (limiter,) = await limiters(keys, clients, clock, 1)
    for _ in range(3):
        assert not isinstance(await attempt(limiter, identity, tokens=10), Exception)
    refused = await attempt(limiter, identity)
    assert isinstance(refused, RateLimitExceededError) and refused.headers["Retry-After"] == "30"
    clock.now += 60  # the minute window is new; the hour window has one request left
    admitted = await limiter.reserve(identity, 0.001, 10)
    headers = dict(limiter.rate_headers(admitted))
    assert (
        headers[b"x-ratelimit-limit-requests"] == b"4" and headers[b"x-ratelimit-remaining-requests"] == b"0"
    )
    assert (
        headers[b"x-ratelimit-limit-tokens"] == b"10000"
        and headers[b"x-ratelimit-remaining-tokens"] == b"9960"
    )
    refused = await attempt(limiter, identity)
    assert isinstance(refused, RateLimitExceededError) and int(refused.headers["Retry-After"]) == 3600 - 90


async def test_a_request_refused_by_its_budget_counts_in_no_rate_window(keys, clients, async_redis) -> None:
    clock = Clock(1_800_000_000.0)
    identity = ClientIdentity("k-both", 0.0015, rate_limits=(RateLimit(window_s=60, requests=10),))
    (limiter,) = await limiters(keys, clients, clock, 1)
    admitted = await limiter.reserve(identity, 0.001)
    refused = await attempt(limiter, identity, 0.001)
    assert admitted is not None and isinstance(refused, BudgetExceededError)
    assert refused.headers["x-ratelimit-remaining-requests"] == "9"  # a limited key's 429 carries them too
    assert await async_redis.hget(keys.rate("k-both", 60, 1_800_000_000), "r") == "1"


async def test_a_keyed_request_costs_the_same_round_trips_with_rate_limits(keys, clients) -> None:
    """Reserve + settle: one command each, with or without rate limits (one script each)."""
    clock = Clock(1_800_000_000.0)
    counts = {}
    for name, identity in (
        ("spend only", ClientIdentity("k-plain", 10.0)),
        (
            "spend and three rate windows",
            ClientIdentity(
                "k-rated",
                10.0,
                rate_limits=(
                    RateLimit(window_s=1, requests=100),
                    RateLimit(window_s=60, requests=1000, tokens=10**6),
                    RateLimit(window_s=86400, tokens=10**8),
                ),
            ),
        ),
    ):
        batcher = CountingBatcher(clients(), 2.0)
        limiter = SpendLimiter(window_s=3600, redis=batcher, keys=keys, timeout_s=2.0, clock=clock)
        await limiter.maintain()  # the epoch, once per replica at start
        # One request first: a Redis that has not seen the scripts' text yet loads them once (NOSCRIPT,
        # then EVAL), which is not the per-request cost measured here.
        await limiter.settle(await limiter.reserve(identity, 0.001, 500), 0.0005, tokens=100)
        batcher.commands = batcher.round_trips = 0
        for _ in range(10):
            reservation = await limiter.reserve(identity, 0.001, 500)
            await limiter.settle(reservation, 0.0005, tokens=100)
        counts[name] = (batcher.commands, batcher.round_trips)
    assert counts == {"spend only": (20, 20), "spend and three rate windows": (20, 20)}


async def test_without_redis_the_same_rule_runs_in_process() -> None:
    clock = Clock(1_800_000_000.0)
    limiter = SpendLimiter(window_s=3600, clock=clock)
    results = [await attempt(limiter, RPM_5) for _ in range(7)]
    assert sum(isinstance(r, RateLimitExceededError) for r in results) == 2
    first = await limiter.reserve(TPM, 0.001, 900)
    assert isinstance(await attempt(limiter, TPM, tokens=900), Exception) is False  # 900 < 1000: room left
    assert isinstance(await attempt(limiter, TPM, tokens=1), RateLimitExceededError)
    await limiter.settle(first, 0.0, tokens=0)  # settled to 0 real tokens: 900 back
    assert not isinstance(await attempt(limiter, TPM, tokens=1), Exception)
    clock.now += 60
    assert not isinstance(await attempt(limiter, RPM_5), Exception)


def test_rate_limit_specs_and_reset_durations() -> None:
    assert parse_rate_limit_spec("1m:requests=60,tokens=90000") == RateLimit(
        window_s=60, requests=60, tokens=90000
    )
    assert parse_rate_limit_spec("1d:tokens=5") == RateLimit(window_s=86400, tokens=5)
    for bad in ("60", "1m:", "1m:requests=-1", "1x:requests=1", "1m:calls=3"):
        with pytest.raises(ValueError):
            parse_rate_limit_spec(bad)
    assert [duration(s) for s in (0.25, 1, 59.5, 60, 360, 3723)] == [
        "250ms",
        "1s",
        "59.5s",
        "1m0s",
        "6m0s",
        "1h2m3s",
    ]


async def test_during_a_redis_outage_a_replica_counts_on_from_redis_and_writes_its_admissions_back(
    keys, async_redis
) -> None:
    link = RedisLink()
    await link.up()
    client = aioredis.from_url(
        link.url, decode_responses=True, socket_connect_timeout=0.5, socket_timeout=0.5
    )
    clock = Clock(1_800_000_000.0)
    limiter = SpendLimiter(
        window_s=3600, redis=client, keys=keys, clock=clock, outage_share=0.5, outage_after_s=0.2
    )
    identity = ClientIdentity("k-outage", 10.0, rate_limits=(RateLimit(window_s=60, requests=10),))
    try:
        first = await limiter.reserve(identity, 0.001)
        assert first is not None and first.backend == "redis"
        await link.down()
        results = [await attempt(limiter, identity) for _ in range(8)]
        admitted = [r for r in results if not isinstance(r, Exception)]
        # Redis last said 1 of 10: this replica's share of the nine left, four whole requests (never
        # the limit counted from zero), refused with the same 429 after.
        assert len(admitted) == 4 and {r.backend for r in admitted} == {"memory"}
        assert all(isinstance(r, RateLimitExceededError) for r in results[4:])
        await link.up()
        await limiter.maintain()
        await limiter.maintain()  # a second round writes nothing twice
        window = keys.rate("k-outage", 60, 1_800_000_000 // 60 * 60)
        assert await async_redis.hget(window, "r") == "5"  # Redis's one and the four counted in process
        after = await attempt(limiter, identity)  # Redis decides again, from 5 of 10
        assert not isinstance(after, Exception) and after.backend == "redis"
        assert after.rate is not None and after.rate.requests == [6]
    finally:
        await client.aclose()
        await link.down()
