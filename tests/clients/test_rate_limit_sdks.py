"""The official openai and anthropic SDKs against a rate-limited key: they see the
``x-ratelimit-*`` headers, get a 429 in their API's error shape with ``Retry-After``, and their own
built-in retry backs off for that long and then succeeds in the next window."""

from __future__ import annotations

import time

import anthropic
import openai
import pytest
from client_support import CLIENT_KEY

from tests.support.gateway_testkit import RunningGateway
from tests.support.scripted_upstream import ok

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
WINDOW_S = 2


@pytest.fixture
def limited_gateway(start_gateway, monkeypatch: pytest.MonkeyPatch) -> RunningGateway:
    """A gateway whose only key may send one request per ``WINDOW_S``-second window."""
    monkeypatch.setenv("TEST_CLIENT_KEYS", CLIENT_KEY)
    return start_gateway(
        auth={"api_keys_env": "TEST_CLIENT_KEYS", "admin_key_env": None},
        budgets={"rate_limits": [{"window_s": WINDOW_S, "requests": 1, "tokens": 1_000_000}]},
    )


def rejections(gateway: RunningGateway) -> float:
    return gateway.sample("cascade_rate_limit_rejections_total", limit="requests")


def start_of_a_window() -> None:
    """Wait until just after a window starts, so that two requests sent now share a window."""
    time.sleep(WINDOW_S - time.time() % WINDOW_S + 0.05)


def test_openai_sdk_sees_the_headers_and_its_retry_waits_out_the_429(limited_gateway, upstream) -> None:
    upstream.set_default("up-large", ok("Paris.", usage=(12, 3)))
    client = openai.OpenAI(base_url=limited_gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
    start_of_a_window()
    raw = client.chat.completions.with_raw_response.create(model="cascade/direct", messages=MESSAGES)
    assert raw.headers["x-ratelimit-limit-requests"] == "1"
    assert raw.headers["x-ratelimit-remaining-requests"] == "0"
    assert raw.headers["x-ratelimit-limit-tokens"] == "1000000"
    assert raw.headers["x-ratelimit-reset-requests"].endswith(("s", "ms"))
    assert raw.parse().choices[0].message.content == "Paris."
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model="cascade/direct", messages=MESSAGES)
    assert refused.value.body["code"] == "rate_limit_exceeded" and refused.value.body["type"] == "requests"
    assert 1 <= int(refused.value.response.headers["retry-after"]) <= WINDOW_S
    assert rejections(limited_gateway) == 1

    # The SDK's own retry (max_retries=2) honours Retry-After and is served in the next window.
    retrying = openai.OpenAI(base_url=limited_gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=2)
    start_of_a_window()
    client.chat.completions.create(model="cascade/direct", messages=MESSAGES)
    started = time.monotonic()
    answer = retrying.chat.completions.create(model="cascade/direct", messages=MESSAGES)
    waited = time.monotonic() - started
    assert answer.choices[0].message.content == "Paris."
    assert rejections(limited_gateway) == 2  # refused once, then served on the SDK's retry
    assert waited >= WINDOW_S - 0.5, waited
    assert len(upstream.calls("up-large")) == 3


def test_anthropic_sdk_sees_the_headers_and_its_retry_waits_out_the_429(limited_gateway, upstream) -> None:
    upstream.set_default("up-large", ok("Paris.", usage=(12, 3)))
    client = anthropic.Anthropic(base_url=limited_gateway.url, api_key=CLIENT_KEY, max_retries=0, timeout=20)
    body = {"model": "cascade/direct", "max_tokens": 64, "messages": MESSAGES}
    start_of_a_window()
    raw = client.messages.with_raw_response.create(**body)
    assert raw.headers["x-ratelimit-limit-requests"] == "1"
    assert raw.headers["x-ratelimit-remaining-requests"] == "0"
    assert raw.parse().content[0].text == "Paris."
    with pytest.raises(anthropic.RateLimitError) as refused:
        client.messages.create(**body)
    assert refused.value.body["type"] == "error" and refused.value.body["error"]["type"] == "rate_limit_error"
    assert 1 <= int(refused.value.response.headers["retry-after"]) <= WINDOW_S
    assert refused.value.response.headers["x-ratelimit-remaining-requests"] == "0"

    retrying = anthropic.Anthropic(
        base_url=limited_gateway.url, api_key=CLIENT_KEY, max_retries=2, timeout=20
    )
    start_of_a_window()
    client.messages.create(**body)
    started = time.monotonic()
    answer = retrying.messages.create(**body)
    waited = time.monotonic() - started
    assert answer.content[0].text == "Paris."
    assert rejections(limited_gateway) == 2
    assert waited >= WINDOW_S - 0.5, waited
