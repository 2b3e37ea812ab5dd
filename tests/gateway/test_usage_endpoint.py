"""``GET /v1/me/usage``: a key sees its own spend, limit, period and rate-limit state, and only its
own (real Redis, keys made by the CLI's function, requests through the real app)."""

from __future__ import annotations

import httpx
import pytest

from gateway.commands.keys import add_key
from gateway.config.key_settings import BudgetPeriod
from tests.support.scripted_upstream import ok

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
def two_keys(start_gateway, make_settings, keys, sync_redis):
    """A gateway with two Redis keys: ``a`` (monthly period in Berlin, rollover, hour and day windows)
    and ``b`` (no limit of its own: the config's defaults)."""
    key_a, id_a = add_key(
        sync_redis,
        "team-a",
        2.0,
        keys,
        rate_limits=[
            {"window_s": 3600, "requests": 10, "tokens": 50_000},
            {"window_s": 86400, "requests": 500},
        ],
        period=BudgetPeriod(kind="monthly", timezone="Europe/Berlin", rollover_cap_usd=1.0),
    )
    key_b, id_b = add_key(sync_redis, "team-b", None, keys)
    settings = make_settings(
        redis_url="redis://127.0.0.1:6379/0",
        budgets={"limit_usd": 0.5, "window_s": 3600},
        auth={"open": False},
    )
    return start_gateway(settings), (key_a, id_a), (key_b, id_b)


def usage(gateway, key: str | None, **headers: str) -> httpx.Response:
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    return gateway.http.get("/v1/me/usage", headers=headers, timeout=10)


def test_a_key_sees_its_own_spend_period_and_rate_limits(two_keys, upstream) -> None:
    gateway, (key_a, id_a), (key_b, id_b) = two_keys
    upstream.set_default("up-large", ok("Paris.", usage=(12, 3)))
    answer = gateway.http.post(
        "/v1/chat/completions",
        json={"model": "cascade/direct", "messages": MESSAGES},
        headers={"authorization": f"Bearer {key_a}"},
        timeout=10,
    )
    assert answer.status_code == 200
    mine = usage(gateway, key_a).json()
    assert mine["key_id"] == id_a and mine["name"] == "team-a" and mine["source"] == "redis"
    spend = mine["spend"]
    assert spend["limit_usd"] == 2.0 and spend["spent_usd"] == pytest.approx(0.001)  # the direct tier's price
    # A key made this month gets no rollover from the last one.
    assert spend["effective_limit_usd"] == 2.0 and spend["rollover_usd"] == 0.0
    assert spend["remaining_usd"] == pytest.approx(1.999)
    assert spend["period"]["kind"] == "monthly" and spend["period"]["timezone"] == "Europe/Berlin"
    assert spend["period"]["start"] < spend["period"]["end"] and spend["period"]["resets_in_s"] > 0
    # Hour and day windows: a request and the read that follows it share them (but at a boundary).
    hour, day = mine["rate_limits"]
    assert hour["window_s"] == 3600 and hour["requests"] == {"limit": 10, "used": 1, "remaining": 9}
    assert hour["tokens"]["used"] == 15 and day["tokens"] is None
    assert day["requests"] == {"limit": 500, "used": 1, "remaining": 499}

    theirs = usage(gateway, None, **{"x-api-key": key_b}).json()  # the Anthropic clients' header
    assert theirs["key_id"] == id_b and theirs["spend"]["spent_usd"] == 0.0
    assert theirs["spend"]["limit_usd"] == 0.5 and theirs["spend"]["period"]["kind"] == "fixed"
    assert theirs["spend"]["period"]["window_s"] == 3600 and theirs["rate_limits"] == []


def test_nothing_in_the_request_can_show_another_key(two_keys) -> None:
    gateway, (key_a, id_a), (_, id_b) = two_keys
    for query in (f"?key_id={id_b}", f"?key={id_b}&name=team-b"):
        answer = gateway.http.get("/v1/me/usage" + query, headers={"authorization": f"Bearer {key_a}"})
        assert answer.json()["key_id"] == id_a
    assert usage(gateway, None).status_code == 401
    refused = usage(gateway, "sk-not-a-key")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    assert id_b not in refused.text
