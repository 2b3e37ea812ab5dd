"""A key is charged at least what the provider billed, fault by fault, and concurrent requests never
take it past its limit by more than one request's worst case: `cascade serve` with a private Redis
in front of the scripted upstream, which bills like a provider (``ScriptedUpstream.billed``: an
answer it was asked for is billed whether or not the client got it; a cap it is sent is honoured).

Prices are the reliability models' (processes.PRICES, USD per million tokens: large 10 / 30).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from processes import PRICES, UPSTREAM_IDS, RedisServer, model_configs
from spend_support import MESSAGES, Money, wait_until

from tests.support.gateway_process import GatewayProcess
from tests.support.money import priced_usd
from tests.support.scripted_upstream import ScriptedUpstream, ok

KEY = "sk-reliability-attempts"
BY_ID = {UPSTREAM_IDS[name]: prices for name, prices in PRICES.items()}
FAULTS = {
    "timeout_before_headers": ok(usage=(20, 3000), delay_s=2.5, honour_cap=True),
    "timeout_mid_body": ok(usage=(20, 3000), stall_body_s=2.5, honour_cap=True),
    "cut_body": ok(usage=(20, 3000), cut_body_at=40, honour_cap=True),
    "connection_drop": ok(usage=(20, 3000), drop_connection=True, honour_cap=True),
}


def models(upstream: ScriptedUpstream, **changes: Any) -> dict[str, Any]:
    configs = model_configs(upstream.base_url)
    for config in configs.values():
        config.update(changes)
    return configs


def start(start_replicas, redis_server: RedisServer, limit_usd: float, **changes: Any) -> GatewayProcess:
    (replica,) = start_replicas(
        1,
        redis=redis_server,
        env={"CASCADE_API_KEYS": KEY},
        budgets={"limit_usd": limit_usd},
        redis_timeout_s=1.0,
        **changes,
    )
    return replica


async def _post(replica: GatewayProcess, path: str, body: dict[str, Any]) -> int:
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.post(
            replica.url + path, json=body, headers={"authorization": f"Bearer {KEY}"}
        )
    return response.status_code


def concurrently(replica: GatewayProcess, count: int, body: dict[str, Any], path: str) -> list[int]:
    async def run() -> list[int]:
        return list(await asyncio.gather(*(_post(replica, path, dict(body)) for _ in range(count))))

    return asyncio.run(run())


def settled_money(money: Money) -> tuple[float, float]:
    """(USD billed by the upstream, the key's Redis counter) once every reservation settled."""
    assert wait_until(lambda: money.pending_reservations() == 0, timeout_s=20)
    return priced_usd(money.upstream.billed, BY_ID), money.counter_usd()


@pytest.mark.parametrize("fault", list(FAULTS))
def test_every_fault_of_an_attempt_is_charged_at_least_what_was_billed(
    start_replicas, redis_server: RedisServer, upstream: ScriptedUpstream, fault: str
) -> None:
    upstream.set_default("up-large", FAULTS[fault])
    replica = start(start_replicas, redis_server, 1.0, models=models(upstream, timeout_s=1.0, max_retries=2))
    body = {"model": "large", "messages": MESSAGES, "max_tokens": 3000}
    statuses = [asyncio.run(_post(replica, "/v1/chat/completions", body)) for _ in range(4)]

    assert set(statuses) <= {502, 504}, statuses
    assert len(upstream.calls("up-large")) == 4  # one attempt each: none is retried
    billed, charged = settled_money(Money(upstream, redis_server, KEY))
    assert billed > 0.3  # 4 x (20 prompt + 3000 completion tokens) at large's price
    assert charged >= billed, (charged, billed)
    # Each charged its worst case: the cap it was sent, the request's bytes.
    assert charged <= 4 * (2_000 * PRICES["large"][0] + 3000 * PRICES["large"][1]) / 1e6


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
def test_uncapped_concurrent_requests_are_sent_the_cap_they_reserved(
    start_replicas, redis_server: RedisServer, upstream: ScriptedUpstream, path: str
) -> None:
    # An answer of 20,000 tokens ($0.60 at large's price) unless the request caps it.
    upstream.set_default("up-large", ok(usage=(20, 20_000), honour_cap=True))
    limit = 1.0
    replica = start(start_replicas, redis_server, limit)
    body: dict[str, Any] = (
        {"model": "large", "messages": MESSAGES} if "chat" in path else {"model": "large", "input": "Hi"}
    )
    statuses = concurrently(replica, 12, body, path)

    billed, charged = settled_money(Money(upstream, redis_server, KEY))
    worst = (2_000 * PRICES["large"][0] + 4096 * PRICES["large"][1]) / 1e6  # the default cap, 4,096
    assert all(call.body["max_tokens"] == 4096 for call in upstream.calls("up-large"))
    assert statuses.count(200) >= 1 and set(statuses) <= {200, 429}, statuses
    assert billed <= limit + worst, (billed, limit)
    assert charged == pytest.approx(billed, abs=1e-9)


def test_concurrent_image_requests_reserve_each_image_at_the_declared_bound(
    start_replicas, redis_server: RedisServer, upstream: ScriptedUpstream
) -> None:
    # 200 images of 1,600 tokens each: $3.20 of prompt per request at large's price.
    upstream.set_default("up-large", ok(usage=(20, 8), image_tokens=1600, honour_cap=True))
    limit = 10.0
    replica = start(start_replicas, redis_server, limit, models=models(upstream, part_tokens={"image": 1600}))
    image = {"type": "image_url", "image_url": {"url": "https://i.example/a.png"}}
    body = {"model": "large", "max_tokens": 8, "messages": [{"role": "user", "content": [image] * 200}]}
    statuses = concurrently(replica, 10, body, "/v1/chat/completions")

    billed, charged = settled_money(Money(upstream, redis_server, KEY))
    worst = (200 * (1600 + 200) * PRICES["large"][0] + 8 * PRICES["large"][1]) / 1e6
    # At most three requests of $3.20 fit in $10 (unbounded by bytes, all ten ran: $32 billed).
    assert 1 <= statuses.count(200) <= 3 and set(statuses) == {200, 429}, statuses
    assert billed <= limit + worst and charged >= billed


def test_an_image_on_a_model_declaring_no_bound_is_refused_before_any_call(
    start_replicas, redis_server: RedisServer, upstream: ScriptedUpstream
) -> None:
    replica = start(start_replicas, redis_server, 10.0)
    image = {"type": "image_url", "image_url": {"url": "https://i.example/a.png"}}
    body = {"model": "large", "max_tokens": 8, "messages": [{"role": "user", "content": [image]}]}
    assert concurrently(replica, 3, body, "/v1/chat/completions") == [400] * 3
    assert upstream.calls() == [] and Money(upstream, redis_server, KEY).counter_usd() == 0.0
