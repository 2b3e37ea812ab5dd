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
