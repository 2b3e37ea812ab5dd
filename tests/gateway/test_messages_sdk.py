"""POST /v1/messages driven by the official anthropic SDK (sync and async) through the real gateway,
in front of the scripted upstream: create, stream, tools, tiers, keys, refusals, in-stream errors."""

from __future__ import annotations

from typing import Any

import anthropic
import orjson
import pytest

from gateway.api.edges.messages import COUNT_TOKENS_REFUSAL
from tests.support.in_process_gateway import InProcessGateway
from tests.support.scripted_upstream import error, ok

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather of a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}


def client(gateway: InProcessGateway, api_key: str = "none", **kw: Any) -> anthropic.Anthropic:
    """The anthropic SDK pointed at the gateway (it appends /v1/messages), no retries."""
    return gateway.anthropic_client(api_key, **kw)


def async_client(gateway: InProcessGateway, api_key: str = "none") -> anthropic.AsyncAnthropic:
    return gateway.async_anthropic_client(api_key)


def tool_call_stream(model: str, arguments: list[str]) -> list[dict[str, Any]]:
    """Chat chunks of a streamed tool call whose arguments arrive in ``arguments`` pieces."""
    base = {"id": "chunk", "object": "chat.completion.chunk", "model": model}
    first = {
        "index": 0,
        "id": "call_7",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    events = [
        {
            **base,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}],
        },
        {**base, "choices": [{"index": 0, "delta": {"tool_calls": [first]}, "finish_reason": None}]},
    ]
    for piece in arguments:
        fragment = {"index": 0, "function": {"arguments": piece}}
        events.append(
            {**base, "choices": [{"index": 0, "delta": {"tool_calls": [fragment]}, "finish_reason": None}]}
        )
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    events.append({**base, "choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 9}})
    return events


@pytest.mark.compat(client="anthropic-sdk", feature="text")
def test_create_serves_a_confident_cheap_answer_as_an_anthropic_message(gateway, upstream) -> None:
    upstream.script("up-small", ok("Paris is the capital.", confidence=0.99))
    raw = client(gateway).messages.with_raw_response.create(
        model="cascade/balanced",
        max_tokens=64,
        system=[{"type": "text", "text": "Answer briefly.", "cache_control": {"type": "ephemeral"}}],
        messages=QUESTION,
        metadata={"user_id": "u-1"},
    )
    message = raw.parse()
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert message.content[0].type == "text" and message.content[0].text == "Paris is the capital."
    assert message.model == "small" and message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (10, 5)
    assert raw.headers["x-cascade-escalated"] == "false" and raw.headers["x-cascade-model"] == "small"
    sent = upstream.calls("up-small")[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.body["messages"] == [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    assert sent.body["max_tokens"] == 64 and sent.body["logprobs"] is True  # scored like any chat request
    assert "metadata" not in sent.body and "user" not in sent.body
    assert (
        gateway.sample("cascade_requests_total", tier="balanced", outcome="accepted", endpoint="messages")
        == 1
    )


@pytest.mark.compat(client="anthropic-sdk", feature="text")
async def test_async_create_escalates_an_unsure_answer(gateway, upstream) -> None:
    upstream.script("up-small", ok(confidence=0.3))
    upstream.script("up-large", ok("Paris.", confidence=0.99, usage=(21, 3)))
    message = await async_client(gateway).messages.create(model="cascade", max_tokens=32, messages=QUESTION)
    assert message.content[0].text == "Paris." and message.model == "large"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (21, 3)
    assert [r.model for r in upstream.requests] == ["up-small", "up-large"]
    assert (
        gateway.sample("cascade_requests_total", tier="balanced", outcome="escalated", endpoint="messages")
        == 1
    )


@pytest.mark.compat(client="anthropic-sdk", feature="stream")
def test_stream_relays_the_escalated_model_live_as_anthropic_events(gateway, upstream) -> None:
    upstream.script("up-small", ok(confidence=0.3))
    upstream.script("up-large", ok("Paris , for sure .", confidence=0.99, usage=(20, 6)))
    with client(gateway).messages.stream(model="cascade", max_tokens=32, messages=QUESTION) as stream:
        assert stream.response.headers["x-cascade-escalated"] == "true"
        assert stream.response.headers["content-type"].startswith("text/event-stream")
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Paris , for sure ."
    assert final.model == "large" and final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (20, 6)
    assert upstream.calls("up-large")[0].body["stream"] is True
    assert (
        gateway.sample("cascade_requests_total", tier="balanced", outcome="escalated", endpoint="messages")
        == 1
    )


@pytest.mark.compat(client="anthropic-sdk", feature="stream")
async def test_async_stream_replays_an_accepted_answer(gateway, upstream) -> None:
    upstream.script("up-small", ok("Paris is lovely.", confidence=0.99))
    async with async_client(gateway).messages.stream(
        model="cascade", max_tokens=32, messages=QUESTION
    ) as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert {"content_block_start", "text", "content_block_stop", "message_delta"} <= set(kinds)
    assert final.content[0].text == "Paris is lovely." and final.model == "small"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (10, 5)


@pytest.mark.compat(client="anthropic-sdk", feature="tools")
def test_streamed_tool_use_arrives_as_input_json_deltas(gateway, upstream) -> None:
    upstream.script("up-small", ok(confidence=0.3))
    upstream.script("up-large", ok(stream_events=tool_call_stream("up-large", ['{"ci', 'ty": "Pa', 'ris"}'])))
    with client(gateway).messages.stream(
        model="cascade", max_tokens=64, messages=QUESTION, tools=[WEATHER_TOOL], tool_choice={"type": "auto"}
    ) as stream:
        pieces = [e.delta.partial_json for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert pieces == ['{"ci', 'ty": "Pa', 'ris"}']  # relayed as the upstream produced them
    block = final.content[0]
    assert block.type == "tool_use" and block.name == "get_weather" and block.input == {"city": "Paris"}
    assert block.id == "call_7" and final.stop_reason == "tool_use"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (40, 9)
    sent = upstream.calls("up-large")[0].body
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": WEATHER_TOOL["input_schema"],
                "description": "Current weather of a city",
            },
        }
    ]
    assert sent["tool_choice"] == "auto"


@pytest.mark.compat(client="anthropic-sdk", feature="tools")
def test_a_tool_round_trip_sends_tool_use_and_tool_result_back_as_chat_tool_messages(
    gateway, upstream
) -> None:
    upstream.script("up-small", ok(None, tool_calls=[CALL]))  # no content tokens to score: escalates
    upstream.script("up-large", ok(None, tool_calls=[CALL]))
    sdk = client(gateway)
    first = sdk.messages.create(model="cascade", max_tokens=64, messages=QUESTION, tools=[WEATHER_TOOL])
    assert first.stop_reason == "tool_use"
    use = first.content[0]
    assert use.type == "tool_use" and use.input == {"city": "Paris"}
    upstream.script("up-small", ok("It is sunny in Paris.", confidence=0.99))
    history = [
        *QUESTION,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]},
    ]
    second = sdk.messages.create(model="cascade", max_tokens=64, messages=history, tools=[WEATHER_TOOL])
    assert second.content[0].text == "It is sunny in Paris." and second.stop_reason == "end_turn"
    sent = upstream.calls("up-small")[-1].body["messages"]
    assert sent[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            }
        ],
    }
    assert sent[2] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}


@pytest.mark.compat(client="anthropic-sdk", feature="structured-output")
def test_a_json_schema_output_format_becomes_a_chat_response_format(gateway, upstream) -> None:
    upstream.script("up-small", ok('{"city": "Paris"}', confidence=0.99))
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    message = client(gateway).messages.create(
        model="cascade",
        max_tokens=64,
        messages=QUESTION,
        output_config={"format": {"type": "json_schema", "schema": schema}},
    )
    assert orjson.loads(message.content[0].text) == {"city": "Paris"}
    assert upstream.calls("up-small")[0].body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": True},
    }


@pytest.mark.compat(client="anthropic-sdk", feature="tier-by-alias")
def test_a_cascade_tier_alias_picks_the_tier(gateway, upstream) -> None:
    raw = client(gateway).messages.with_raw_response.create(
        model="cascade/direct", max_tokens=16, messages=QUESTION
    )
    assert raw.parse().model == "large"
    assert raw.headers["x-cascade-tier"] == "direct"
    assert [r.model for r in upstream.requests] == ["up-large"]


@pytest.mark.compat(client="anthropic-sdk", feature="tier-by-header")
def test_the_tier_header_picks_the_tier(gateway, upstream) -> None:
    raw = client(gateway).messages.with_raw_response.create(
        model="cascade", max_tokens=16, messages=QUESTION, extra_headers={"X-Cascade-Tier": "chain"}
    )
    assert raw.headers["x-cascade-tier"] == "chain"
    assert raw.headers["x-cascade-models-called"] == "small"  # the confident default answer is accepted
    assert (
        gateway.sample("cascade_requests_total", tier="chain", outcome="accepted", endpoint="messages") == 1
    )


@pytest.fixture
def keyed_gateway(start_gateway, make_settings, monkeypatch) -> InProcessGateway:
    monkeypatch.setenv("TEST_CLIENT_KEYS", "sk-client-1")
    return start_gateway(make_settings(auth={"api_keys_env": "TEST_CLIENT_KEYS", "admin_key_env": None}))


def test_the_key_is_read_from_x_api_key_or_a_bearer_token(keyed_gateway, upstream) -> None:
    by_api_key = client(keyed_gateway, api_key="sk-client-1").messages.create(
        model="cascade", max_tokens=16, messages=QUESTION
    )
    assert by_api_key.content[0].text
    bearer = anthropic.Anthropic(
        base_url=keyed_gateway.url,
        http_client=keyed_gateway.anthropic_http_client(),
        auth_token="sk-client-1",
        max_retries=0,
    )
    assert bearer.messages.create(model="cascade", max_tokens=16, messages=QUESTION).content[0].text


def test_a_wrong_or_missing_key_is_an_anthropic_shaped_401(keyed_gateway, upstream) -> None:
    with pytest.raises(anthropic.AuthenticationError) as wrong:
        client(keyed_gateway, api_key="sk-wrong").messages.create(
            model="cascade", max_tokens=16, messages=QUESTION
        )
    assert wrong.value.body["type"] == "error"
    assert wrong.value.body["error"] == {
        "type": "authentication_error",
        "message": "Incorrect API key provided.",
    }
    assert wrong.value.request_id == wrong.value.body["request_id"]
    assert wrong.value.response.headers["x-should-retry"] == "false"  # Claude Code retries a 401 otherwise
    missing = keyed_gateway.http.post(
        "/v1/messages",
        json={"model": "cascade", "max_tokens": 16, "messages": QUESTION},
        headers={"anthropic-version": "2023-06-01"},
    )
    assert missing.status_code == 401 and "x-api-key" in missing.json()["error"]["message"]
    assert upstream.requests == []
    assert (
        keyed_gateway.sample("cascade_requests_total", tier="none", outcome="error", endpoint="messages") == 2
    )


def test_a_spent_budget_is_an_anthropic_429_the_sdk_does_not_retry(
    start_gateway, make_settings, upstream, monkeypatch
):
    monkeypatch.setenv("TEST_CLIENT_KEYS", "sk-budget")
    gateway = start_gateway(
        make_settings(
            auth={"api_keys_env": "TEST_CLIENT_KEYS", "admin_key_env": None},
            budgets={"limit_usd": 0.0015, "window_s": 3600},
        )
    )
    # The SDK retries a 429 after its Retry-After (the rest of the budget window, however long)
    # unless the response says x-should-retry: false, which it obeys.
    sdk = client(gateway, api_key="sk-budget")
    sdk.messages.create(model="cascade/direct", max_tokens=16, messages=QUESTION)  # spends 0.001 of 0.0015
    with pytest.raises(anthropic.RateLimitError) as caught:
        sdk.messages.create(model="cascade/direct", max_tokens=16, messages=QUESTION)
    assert caught.value.body["error"]["type"] == "rate_limit_error"
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert int(caught.value.response.headers["retry-after"]) > 0
    assert gateway.sample("cascade_budget_rejections_total") == 1
    assert len(upstream.calls("up-large")) == 1


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"extra_body": {"container": "c-1"}}, "container"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0]"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "document",
                                "source": {"type": "text", "data": "x", "media_type": "text/plain"},
                            }
                        ],
                    }
                ]
            },
            "messages[0].content[0]",
        ),
    ],
)
def test_what_cannot_be_honoured_is_a_clear_anthropic_400(gateway, upstream, extra, named) -> None:
    request = {"model": "cascade", "max_tokens": 16, "messages": QUESTION, **extra}
    with pytest.raises(anthropic.BadRequestError) as caught:
        client(gateway).messages.create(**request)
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert named in caught.value.body["error"]["message"]
    assert upstream.requests == []


def test_a_request_without_max_tokens_is_a_400_naming_it(gateway, upstream) -> None:
    response = gateway.http.post("/v1/messages", json={"model": "cascade", "messages": QUESTION})
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert "'max_tokens' is required" in response.json()["error"]["message"]


def test_claude_codes_beta_query_and_headers_are_accepted(gateway, upstream) -> None:
    response = gateway.http.post(
        "/v1/messages?beta=true",
        json={
            "model": "cascade",
            "max_tokens": 32000,
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Say hello"}]},
                {
                    "role": "system",
                    "content": [{"type": "text", "text": "# Env", "cache_control": {"type": "ephemeral"}}],
                },
            ],
            "thinking": {"type": "adaptive", "display": "omitted"},
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            "output_config": {"effort": "high"},
        },
        headers={
            "anthropic-version": "2023-06-01",
            "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14",
            "x-api-key": "any",
        },
    )
    assert response.status_code == 200 and response.json()["type"] == "message"


def test_an_upstream_cut_after_the_stream_started_is_an_anthropic_error_event(gateway, upstream) -> None:
    upstream.script("up-small", ok(confidence=0.3))
    upstream.script("up-large", ok("one two three four five", break_stream_after=3))
    stream_call = client(gateway).messages.stream(model="cascade", max_tokens=32, messages=QUESTION)
    with pytest.raises(anthropic.APIStatusError) as caught, stream_call as stream:
        for _ in stream:
            pass
    assert caught.value.body["type"] == "error"
    assert caught.value.body["error"]["type"] == "api_error"
    assert (
        gateway.sample("cascade_requests_total", tier="balanced", outcome="error", endpoint="messages") == 1
    )


def test_an_upstream_failure_before_any_byte_is_an_anthropic_error_status(
    start_gateway, write_policy, make_settings, upstream
) -> None:
    gateway = start_gateway(make_settings(policy=write_policy(allow_degraded=False)))
    upstream.script("up-small", ok(confidence=0.3))
    upstream.set_default("up-large", error(503))
    with pytest.raises(anthropic.APIStatusError) as caught:
        client(gateway).messages.create(model="cascade", max_tokens=32, messages=QUESTION)
    assert caught.value.status_code == 502
    assert caught.value.body["error"]["type"] == "api_error"


def test_count_tokens_is_refused_with_a_clear_anthropic_404(gateway, upstream) -> None:
    with pytest.raises(anthropic.NotFoundError) as caught:
        client(gateway).messages.count_tokens(model="cascade", messages=QUESTION)
    assert caught.value.body["error"] == {"type": "not_found_error", "message": COUNT_TOKENS_REFUSAL}
