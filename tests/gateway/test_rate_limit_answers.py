"""Every answer of a rate-limited key carries the ``x-ratelimit-*`` headers (chat, streamed chat,
Responses, Messages, their errors), a refusal is a 429 in each API's own error shape, and a key
without rate limits gets none of them."""

from __future__ import annotations

import httpx
import pytest

from tests.support.scripted_upstream import error, ok

MESSAGES = [{"role": "user", "content": "hi"}]
KEY = "sk-limited"
OTHER = "sk-unlimited"
RATE_HEADERS = {
    f"x-ratelimit-{what}-{kind}"
    for what in ("limit", "remaining", "reset")
    for kind in ("requests", "tokens")
}


@pytest.fixture
def limited(start_gateway, make_settings, monkeypatch, keys, sync_redis):
    """One key with the config's default rate limits (3 requests, 100,000 tokens an hour: the
    test's requests share one window), and a Redis-stored key without any limit (its record says
    so: ``rate_limits: []``)."""
    from gateway.commands.keys import add_key

    monkeypatch.setenv("TEST_CLIENT_KEYS", KEY)
    unlimited, _ = add_key(sync_redis, "free", None, keys, rate_limits=[])
    settings = make_settings(
        auth={"api_keys_env": "TEST_CLIENT_KEYS", "admin_key_env": None},
        redis_url="redis://127.0.0.1:6379/0",
        budgets={"rate_limits": [{"window_s": 3600, "requests": 3, "tokens": 100_000}]},
    )
    return start_gateway(settings), unlimited


def post(gateway, path: str, body: dict, key: str = KEY) -> httpx.Response:
    return gateway.http.post(path, json=body, headers={"authorization": f"Bearer {key}"}, timeout=20)


def test_each_api_answers_with_the_headers_and_refuses_in_its_own_shape(limited, upstream) -> None:
    gateway, unlimited = limited
    upstream.set_default("up-large", ok("Paris.", usage=(12, 3)))
    chat = post(gateway, "/v1/chat/completions", {"model": "cascade/direct", "messages": MESSAGES})
    assert chat.status_code == 200 and set(chat.headers) >= RATE_HEADERS
    assert chat.headers["x-ratelimit-remaining-requests"] == "2"
    # The worst case was reserved, then settled to the 15 tokens the upstream reported.
    streamed = post(
        gateway, "/v1/chat/completions", {"model": "cascade/direct", "messages": MESSAGES, "stream": True}
    )
    assert streamed.status_code == 200 and streamed.headers["x-ratelimit-remaining-requests"] == "1"
    assert int(streamed.headers["x-ratelimit-remaining-tokens"]) < 100_000 - 15
    responses = post(gateway, "/v1/responses", {"model": "cascade/direct", "input": "hi"})
    assert responses.status_code == 200 and responses.headers["x-ratelimit-remaining-requests"] == "0"

    refused = post(gateway, "/v1/responses", {"model": "cascade/direct", "input": "hi"})
    assert refused.status_code == 429 and set(refused.headers) >= RATE_HEADERS
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert 1 <= int(refused.headers["retry-after"]) <= 3600
    chat_refused = post(gateway, "/v1/chat/completions", {"model": "cascade/direct", "messages": MESSAGES})
    assert chat_refused.json()["error"] == {
        "message": chat_refused.json()["error"]["message"],
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
    messages = post(
        gateway, "/v1/messages", {"model": "cascade/direct", "max_tokens": 16, "messages": MESSAGES}
    )
    assert messages.status_code == 429 and messages.json()["error"]["type"] == "rate_limit_error"
    assert messages.headers["x-ratelimit-remaining-requests"] == "0"
    assert "x-should-retry" not in messages.headers  # a rate limit heals: the SDK may retry it
    assert gateway.sample("cascade_rate_limit_rejections_total", limit="requests") == 3

    free = post(gateway, "/v1/chat/completions", {"model": "cascade/direct", "messages": MESSAGES}, unlimited)
    assert free.status_code == 200 and not RATE_HEADERS & set(free.headers)


def test_an_answer_that_fails_after_admission_carries_the_headers_too(limited, upstream) -> None:
    gateway, _ = limited
    upstream.set_default("up-large", error(500))
    failed = post(gateway, "/v1/chat/completions", {"model": "cascade/direct", "messages": MESSAGES})
    assert failed.status_code == 502 and failed.headers["x-ratelimit-remaining-requests"] == "2"
