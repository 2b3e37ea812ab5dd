"""The completion endpoints enforce client keys (401) and per-key spend limits (429) end to end."""

from __future__ import annotations

import openai
import pytest

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
def keyed_gateway(start_gateway, make_settings, monkeypatch):
    monkeypatch.setenv("TEST_CLIENT_KEYS", "sk-client-1")
    settings = make_settings(
        auth={"api_keys_env": "TEST_CLIENT_KEYS", "admin_key_env": None},
        budgets={"limit_usd": 0.0015, "window_s": 3600},
    )
    return start_gateway(settings)


def test_missing_or_wrong_key_is_401(keyed_gateway, upstream) -> None:
    with pytest.raises(openai.AuthenticationError):
        keyed_gateway.client(api_key="sk-wrong").chat.completions.create(model="cascade", messages=MESSAGES)
    assert upstream.requests == []
    assert keyed_gateway.sample("cascade_requests_total", tier="none", outcome="error") == 1
    with pytest.raises(openai.AuthenticationError):
        keyed_gateway.client(api_key="sk-wrong").models.list()
    assert "cascade" in [m.id for m in keyed_gateway.client(api_key="sk-client-1").models.list()]


def test_spend_limit_refuses_with_429_once_spent(keyed_gateway, upstream) -> None:
    client = keyed_gateway.client(api_key="sk-client-1")
    # direct tier: reserves and spends 0.001 USD per request against the 0.0015 USD limit.
    client.chat.completions.create(model="cascade/direct", messages=MESSAGES)
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model="cascade/direct", messages=MESSAGES)
    assert info.value.body["code"] == "budget_exceeded"
    assert len(upstream.calls("up-large")) == 1
    assert keyed_gateway.sample("cascade_budget_rejections_total") == 1


def test_reservation_covers_the_worst_case_of_a_per_token_route(start_gateway, make_settings, monkeypatch):
    # small is priced per token (0.2 USD/Mtok output): a 10,000-token cap on a route that may call
    # small then large (0.001/query) has a worst case above a 0.002 USD limit, so it is refused
    # before any call, while the same request capped at 10 tokens fits and is served.
    monkeypatch.setenv("TEST_CLIENT_KEYS", "sk-client-2")
    gateway = start_gateway(
        make_settings(
            auth={"api_keys_env": "TEST_CLIENT_KEYS", "admin_key_env": None},
            budgets={"limit_usd": 0.002, "window_s": 3600},
        )
    )
    client = gateway.client(api_key="sk-client-2")
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="cascade", messages=MESSAGES, max_tokens=10_000)
    client.chat.completions.create(model="cascade", messages=MESSAGES, max_tokens=10)
