"""Spend limits as money, through two real replicas sharing a private Redis: the reservation is the
true worst case (every completion cap the upstream may honour, times the choices generated, over
every stage), and a request that cost more than its reservation is charged in full and stops the key.

Each test checks the key's Redis counter against what the scripted upstream produced, priced at
the configured prices: within one request's worst case (in practice to the nano-dollar), and the
true spend above the limit by at most one request's worst case.
"""

from __future__ import annotations

import pytest
from processes import PRICES, RedisServer
from spend_support import MESSAGES, Money, burst, limited_replicas, send, wait_until

from tests.support.gateway_process import GatewayProcess
from tests.support.money import worst_case_usd
from tests.support.scripted_upstream import ScriptedUpstream, ok

KEY = "sk-reliability-money"
LIMIT_USD = 1.0


@pytest.fixture
def replicas(start_replicas, redis_server: RedisServer) -> list[GatewayProcess]:
    """Two replicas, one Redis, the key ``KEY`` with a limit of ``LIMIT_USD`` per day
    (spend_support.limited_replicas)."""
    return limited_replicas(start_replicas, redis_server, KEY, LIMIT_USD)


@pytest.fixture
def money(upstream: ScriptedUpstream, redis_server: RedisServer) -> Money:
    return Money(upstream, redis_server, KEY)


def assert_exact_and_bounded(money: Money, worst_usd: float, limit_usd: float = LIMIT_USD) -> None:
    """Counter within one worst case of the truth (and to the micro-dollar); truth within the limit
    plus one worst case."""
    # A replica settles right after the response is written: let the last ones land.
    assert wait_until(lambda: money.pending_reservations() == 0, timeout_s=10)
    true_usd, counter_usd = money.true_usd(), money.counter_usd()
    assert abs(counter_usd - true_usd) <= min(worst_usd, 1e-6), (counter_usd, true_usd)
    assert true_usd <= limit_usd + worst_usd, (true_usd, limit_usd)


@pytest.mark.parametrize(
    ("completion_tokens", "body", "admitted"),
    [
        # n choices are reserved: 100 tokens per choice, ~0.18 USD, five fit under 1 USD.
        pytest.param(100, {"model": "large", "n": 60, "max_tokens": 100}, 5, id="n-choices-60"),
        # The larger completion cap is reserved when both are given (the upstream honours
        # max_tokens): ~0.15 USD, six fit under 1 USD.
        pytest.param(
            5000,
            {"model": "large", "max_completion_tokens": 1, "max_tokens": 5000},
            6,
            id="larger-completion-cap-of-both",
        ),
    ],
)
def test_the_worst_case_is_reserved_so_a_burst_of_20_stays_within_the_limit(
    replicas, upstream: ScriptedUpstream, money: Money, completion_tokens: int, body: dict, admitted: int
) -> None:
    upstream.set_default("up-large", ok(usage=(20, completion_tokens)))
    worst = worst_case_usd({"messages": MESSAGES, **body}, ["large"], PRICES)
    statuses = burst(replicas, KEY, 20, **body)
    assert statuses.count(200) == admitted and statuses.count(429) == 20 - admitted, statuses
    assert_exact_and_bounded(money, worst)


def test_a_cost_above_its_reservation_is_charged_and_the_key_refused_until_back_under(
    replicas, upstream: ScriptedUpstream, money: Money
) -> None:
    upstream.set_default("up-large", ok(usage=(20, 20_000)))  # ignores max_tokens: $0.6 per answer
    body = {"model": "large", "max_tokens": 10}
    assert send(replicas[0], KEY, **body)[0] == 200
    assert send(replicas[1], KEY, **body)[0] == 200  # $0.6 spent: a $0.0006 worst case still fits
    assert wait_until(lambda: money.pending_reservations() == 0, timeout_s=10)
    assert money.counter_usd() == pytest.approx(money.true_usd(), abs=1e-6)
    assert money.counter_usd() > LIMIT_USD  # charged in full, above the limit
    assert [send(replicas[i % 2], KEY, **body)[0] for i in range(4)] == [429] * 4
    assert money.counter_usd() == pytest.approx(money.true_usd(), abs=1e-6)
    assert len(upstream.produced) == 2


def test_a_concurrent_cascade_burst_across_two_replicas_admits_only_what_the_limit_covers(
    replicas, upstream: ScriptedUpstream, money: Money
) -> None:
    # Half of the cheap answers are unconfident: those requests escalate to large.
    upstream.set_default("up-small", ok(usage=(30, 40)))
    upstream.script("up-small", *[ok(confidence=0.3 if i % 2 else 0.99, usage=(30, 40)) for i in range(40)])
    upstream.set_default("up-large", ok(usage=(30, 2000)))
    body = {"model": "cascade", "max_tokens": 2000}
    worst = worst_case_usd(
        {"messages": MESSAGES, **body}, ["small", "large"], PRICES
    )  # ~0.064 USD: 15 fit under 1 USD at once
    statuses = burst(replicas, KEY, 40, **body)
    # Accepted answers settle far below their reservation, which lets later requests of the burst in.
    assert statuses.count(200) >= 15 and statuses.count(429) >= 1, statuses
    assert_exact_and_bounded(money, worst)
