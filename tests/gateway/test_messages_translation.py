"""The /v1/messages translation: Anthropic request -> chat body, chat answer -> Anthropic message and
SSE events, gateway errors -> Anthropic error bodies. Shapes are checked against the anthropic SDK's
own types (the source of truth for what its clients parse)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from anthropic.types.shared import ErrorResponse
from pydantic import TypeAdapter

from gateway.api.edges.messages import MessagesEdge
from gateway.api.edges.messages_request import translate_request
from gateway.api.edges.messages_response import error_body, render_message
from gateway.api.edges.messages_stream import MessagesStream, error_event
from gateway.streaming.sse import replay
from gateway.wire.errors import (
    AuthenticationError,
    BadRequestError,
    BodyTooLargeError,
    BudgetExceededError,
    GatewayError,
    InternalError,
    ModelNotFoundError,
    ShuttingDownError,
    UpstreamError,
    UpstreamTimeoutError,
)

EVENTS = TypeAdapter(RawMessageStreamEvent)
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather of a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "cache_control": {"type": "ephemeral"},
}


def translate(**body: Any) -> dict[str, Any]:
    return translate_request(orjson.dumps({"model": "cascade/balanced", "max_tokens": 64, **body})).chat


def test_a_claude_code_request_keeps_every_message_in_place_and_drops_only_documented_hints() -> None:
    chat = translate(
        system=[
            {"type": "text", "text": "You are an agent."},
            {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
        ],
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": "<reminder>"}, {"type": "text", "text": "Hi"}],
            },
            {"role": "system", "content": [{"type": "text", "text": "# Environment", "cache_control": {}}]},
        ],
        tools=[WEATHER_TOOL, {**WEATHER_TOOL, "name": "later", "defer_loading": True}],
        metadata={"user_id": "someone"},
        thinking={"type": "adaptive", "display": "omitted"},
        context_management={"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        output_config={"effort": "high"},
        stream=True,
    )
    assert chat["messages"] == [
        {"role": "system", "content": "You are an agent.\n\nBe brief."},
        {"role": "user", "content": "<reminder>\n\nHi"},
        {"role": "system", "content": "# Environment"},
    ]
    assert [t["function"]["name"] for t in chat["tools"]] == ["get_weather", "later"]
    assert chat["tools"][0] == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": WEATHER_TOOL["input_schema"],
            "description": "Weather of a city",
        },
    }
    assert chat["stream"] is True and chat["max_tokens"] == 64
    for dropped in ("metadata", "thinking", "context_management", "output_config", "user"):
        assert dropped not in chat


def test_a_tool_round_trip_becomes_tool_calls_and_tool_messages_in_order() -> None:
    chat = translate(
        messages=[
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "...", "signature": "x"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny", "is_error": False},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": [{"type": "text", "text": "service down"}],
                        "is_error": True,
                        "cache_control": {"type": "ephemeral"},
                    },
                    {"type": "text", "text": "Summarise."},
                ],
            },
        ]
    )
    assert chat["messages"][1:] == [
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "toolu_2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: service down"},
        {"role": "user", "content": "Summarise."},
    ]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, {"tool_choice": "auto"}),
        ({"type": "any"}, {"tool_choice": "required"}),
        ({"type": "none"}, {"tool_choice": "none"}),
        (
            {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
            {
                "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                "parallel_tool_calls": False,
            },
        ),
    ],
)
def test_tool_choice_maps_to_its_chat_equivalent(choice: dict[str, Any], expected: dict[str, Any]) -> None:
    chat = translate(messages=[{"role": "user", "content": "x"}], tools=[WEATHER_TOOL], tool_choice=choice)
    assert {k: chat[k] for k in expected} == expected
    if "parallel_tool_calls" not in expected:
        assert "parallel_tool_calls" not in chat


def test_sampling_stops_images_and_json_output_are_forwarded() -> None:
    chat = translate(
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"},
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
                    {"type": "text", "text": "What is this?"},
                ],
            }
        ],
        temperature=0.2,
        top_p=0.9,
        top_k=40,
        stop_sequences=["\n\nHuman:"],
        output_config={"format": {"type": "json_schema", "schema": {"type": "object"}}},
    )
    assert chat["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        {"type": "text", "text": "What is this?"},
    ]
    assert (chat["temperature"], chat["top_p"], chat["top_k"], chat["stop"]) == (0.2, 0.9, 40, ["\n\nHuman:"])
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": {"type": "object"}, "strict": True},
    }


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"max_tokens": None}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"model": ""}, "model"),
        ({"messages": []}, "messages"),
        ({"container": "c1"}, "container"),
        ({"mcp_servers": []}, "mcp_servers"),
        ({"thinking": {"type": "sometimes"}}, "thinking"),
        ({"metadata": "me"}, "metadata"),
        ({"stream": "yes"}, "stream"),
        ({"top_k": -1}, "top_k"),
        ({"stop_sequences": "END"}, "stop_sequences"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0]"),
        ({"tools": [{"name": "t", "input_schema": {}, "input_examples": [{}]}]}, "tools[0].input_examples"),
        ({"tool_choice": {"type": "tool"}}, "tool_choice"),
        ({"output_config": {"task_budget": 1}}, "output_config.task_budget"),
        (
            {"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
            "messages[0].content[0]",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}],
                    }
                ]
            },
            "messages[0].content[0].source",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t",
                                "content": [{"type": "image", "source": {"type": "url", "url": "u"}}],
                            }
                        ],
                    }
                ]
            },
            "messages[0].content[0].content[0]",
        ),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        (
            {"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n"}]}]},
            "messages[0].content[0]",
        ),
    ],
)
def test_what_cannot_be_honoured_is_a_400_naming_the_field(body: dict[str, Any], param: str) -> None:
    request = {"model": "cascade", "max_tokens": 16, "messages": [{"role": "user", "content": "x"}], **body}
    with pytest.raises(BadRequestError) as caught:
        translate_request(orjson.dumps({k: v for k, v in request.items() if v is not None}))
    assert caught.value.param == param
    assert param.split("[")[0].split(".")[0] in caught.value.message


def chat_answer(message: dict[str, Any], finish: str, **choice: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, **choice}],
        "usage": {"prompt_tokens": 31, "completion_tokens": 7, "total_tokens": 38},
    }


def test_a_chat_answer_with_text_and_tool_calls_renders_as_a_valid_anthropic_message() -> None:
    answer = chat_answer(
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        "tool_calls",
    )
    message = Message.model_validate(render_message(answer, "small", ()))
    assert message.id.startswith("msg_") and message.model == "small"
    assert message.stop_reason == "tool_use" and message.stop_sequence is None
    assert [b.type for b in message.content] == ["text", "tool_use"]
    tool = message.content[1]
    assert tool.type == "tool_use" and tool.id == "call_9" and tool.input == {"city": "Paris"}
    assert (message.usage.input_tokens, message.usage.output_tokens) == (31, 7)


@pytest.mark.parametrize(
    ("finish", "choice", "stops", "expected"),
    [
        ("stop", {}, (), ("end_turn", None)),
        ("length", {}, (), ("max_tokens", None)),
        ("content_filter", {}, (), ("refusal", None)),
        ("stop", {"stop_reason": "END"}, ("END",), ("stop_sequence", "END")),  # vLLM names the match
        ("stop", {"stop_reason": 151645}, ("END",), ("end_turn", None)),  # an EOS token id is no sequence
    ],
)
def test_finish_reasons_map_to_anthropic_stop_reasons(
    finish: str, choice: dict[str, Any], stops: tuple[str, ...], expected: tuple[str, str | None]
) -> None:
    rendered = render_message(
        chat_answer({"role": "assistant", "content": "x"}, finish, **choice), "m", stops
    )
    assert (rendered["stop_reason"], rendered["stop_sequence"]) == expected


def test_tool_arguments_that_are_not_a_json_object_are_an_upstream_error_not_a_broken_block() -> None:
    answer = chat_answer(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[1"}}],
        },
        "tool_calls",
    )
    with pytest.raises(UpstreamError):
        render_message(answer, "m", ())


def parse_events(data: bytes) -> list[Any]:
    """Every SSE event, checked: its ``event:`` name equals its data's type and the SDK accepts it."""
    events = []
    for raw in data.decode().split("\n\n"):
        if not raw:
            continue
        name_line, data_line = raw.split("\n")
        payload = orjson.loads(data_line.removeprefix("data: "))
        assert name_line == f"event: {payload['type']}"
        events.append(payload if payload["type"] in ("ping", "error") else EVENTS.validate_python(payload))
    return events


def accumulate(events: list[Any]) -> dict[str, Any]:
    """Fold a stream into the final message, as a client does."""
    message: dict[str, Any] = {}
    inputs: dict[int, str] = {}
    for e in events:
        if isinstance(e, dict):
            continue
        if e.type == "message_start":
            message = e.message.model_dump()
        elif e.type == "content_block_start":
            assert e.index == len(message["content"])
            message["content"].append(e.content_block.model_dump(exclude_none=True))
        elif e.type == "content_block_delta":
            block = message["content"][e.index]
            if e.delta.type == "text_delta":
                block["text"] += e.delta.text
            else:
                inputs[e.index] = inputs.get(e.index, "") + e.delta.partial_json
        elif e.type == "message_delta":
            message["stop_reason"] = e.delta.stop_reason
            message["usage"]["output_tokens"] = e.usage.output_tokens
            if e.usage.input_tokens is not None:
                message["usage"]["input_tokens"] = e.usage.input_tokens
    for index, text in inputs.items():
        message["content"][index]["input"] = orjson.loads(text)
    return message


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "c", "object": "chat.completion.chunk", "choices": choices, **extra}


def test_a_live_chat_stream_of_text_then_tool_calls_becomes_anthropic_events() -> None:
    stream = MessagesStream()
    out = stream.start("large")
    for piece in (
        chunk({"role": "assistant", "content": None}),
        chunk({"content": "Checking"}),
        chunk({"content": " now."}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
        chunk(
            {"tool_calls": [{"index": 1, "id": "call_2", "function": {"arguments": '{"city"'}}]}
        ),  # name comes late
        chunk({"tool_calls": [{"index": 1, "function": {"name": "get_weather", "arguments": ': "Rome"}'}}]}),
        chunk({}, "tool_calls"),
        chunk(usage={"prompt_tokens": 50, "completion_tokens": 12}),
    ):
        out += stream.chunk(piece)
    out += stream.finish({"escalated": True})
    events = parse_events(out)
    types = [e["type"] if isinstance(e, dict) else e.type for e in events]
    assert types[:2] == ["message_start", "ping"] and types[-2:] == ["message_delta", "message_stop"]
    assert types.count("content_block_start") == types.count("content_block_stop") == 3
    message = accumulate(events)
    assert message["model"] == "large" and message["stop_reason"] == "tool_use"
    assert message["content"] == [
        {"type": "text", "text": "Checking now."},
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"city": "Rome"}},
    ]
    assert (message["usage"]["input_tokens"], message["usage"]["output_tokens"]) == (50, 12)
    assert b'"cascade":{"escalated":true}' in out


def test_a_stream_without_usage_counts_one_output_token_per_chunk_and_keeps_the_start_input_count() -> None:
    stream = MessagesStream()
    out = stream.start("m", input_tokens=9)
    for word in ("a", " b", " c"):
        out += stream.chunk(chunk({"content": word}))
    out += stream.chunk(chunk({}, "length"))
    message = accumulate(parse_events(out + stream.finish()))
    assert message["stop_reason"] == "max_tokens"
    assert (message["usage"]["input_tokens"], message["usage"]["output_tokens"]) == (9, 3)


def test_interleaved_tool_call_fragments_are_an_upstream_error() -> None:
    stream = MessagesStream()
    stream.start("m")
    stream.chunk(
        chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": "{"}}]})
    )
    stream.chunk(
        chunk({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g", "arguments": "{"}}]})
    )
    with pytest.raises(UpstreamError):
        stream.chunk(chunk({"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}))


def test_an_accepted_answer_replayed_by_the_engine_becomes_the_same_message_as_its_render() -> None:
    answer = chat_answer(
        {
            "role": "assistant",
            "content": "Sure.",
            "tool_calls": [{"id": "c1", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}],
        },
        "tool_calls",
    )
    answer["model"] = "small"
    edge = MessagesEdge()
    translated = edge.translate(
        orjson.dumps(
            {
                "model": "cascade",
                "max_tokens": 9,
                "messages": [{"role": "user", "content": "x"}],
                "stream": True,
            }
        ),
        "r1",
    )
    chat_sse = replay(answer, translated.request, {"escalated": False})  # what the engine writes
    out = edge.stream_translator(translated.context).translate(chat_sse)
    message = accumulate(parse_events(out))
    rendered = orjson.loads(edge.render(answer, translated.context))
    assert {k: message[k] for k in ("content", "stop_reason", "model")} == {
        k: rendered[k] for k in ("content", "stop_reason", "model")
    }
    assert (message["usage"]["input_tokens"], message["usage"]["output_tokens"]) == (31, 7)
    assert b'"cascade":{"escalated":false}' in out


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (BadRequestError("bad"), 400, "invalid_request_error"),
        (AuthenticationError("who"), 401, "authentication_error"),
        (ModelNotFoundError("none"), 404, "not_found_error"),
        (BodyTooLargeError("big"), 413, "request_too_large"),
        (BudgetExceededError("spent"), 429, "rate_limit_error"),
        (InternalError("oops"), 500, "api_error"),
        (UpstreamError("down"), 502, "api_error"),
        (ShuttingDownError("bye"), 503, "overloaded_error"),
        (UpstreamTimeoutError("slow"), 504, "timeout_error"),
    ],
)
def test_errors_carry_the_anthropic_type_of_their_status(error: GatewayError, status: int, kind: str) -> None:
    body = error_body(error, "req_1")
    assert body == {"type": "error", "error": {"type": kind, "message": error.message}, "request_id": "req_1"}
    assert error.status == status
    if kind != "request_too_large":  # documented for 413 (sent by Anthropic's proxy), not in the SDK's union
        ErrorResponse.model_validate(body)
    name, data = error_event(error).decode().strip().split("\n")
    assert name == "event: error" and orjson.loads(data.removeprefix("data: "))["error"]["type"] == kind


def test_a_body_too_deep_to_forward_is_a_400() -> None:
    body = {"model": "cascade", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}
    body["tools"] = [{"name": "t", "input_schema": {"type": "object", "properties": {"p": {"d": "x"}}}}]
    MessagesEdge().translate(orjson.dumps(body), "r")  # shallow: fine
    nested = orjson.dumps(body).replace(b'"p":{"d":"x"}', b'"p":' + b'{"d":' * 300 + b'"x"' + b"}" * 300)
    with pytest.raises(BadRequestError, match="deeper than 254 levels"):
        MessagesEdge().translate(nested, "r")


@pytest.mark.parametrize(
    ("headers", "credential"),
    [
        ({b"x-api-key": b"sk-a"}, "Bearer sk-a"),
        ({b"x-api-key": b"sk-a", b"authorization": b"Bearer sk-b"}, "Bearer sk-a"),  # x-api-key wins
        ({b"x-api-key": b"  ", b"authorization": b"Bearer sk-b"}, "Bearer sk-b"),
        ({b"authorization": b"Bearer sk-b"}, "Bearer sk-b"),
        ({}, None),
    ],
)
def test_the_key_comes_from_x_api_key_first_then_authorization(
    headers: dict[bytes, bytes], credential: str | None
) -> None:
    assert MessagesEdge().credential(headers) == credential


def test_prompt_tokens_an_upstream_read_from_its_cache_are_cache_reads() -> None:
    # llama-server reports the prefix it reused as prompt_tokens_details.cached_tokens.
    answer = chat_answer({"role": "assistant", "content": "42"}, "stop")
    answer["usage"]["prompt_tokens_details"] = {"cached_tokens": 29}
    message = Message.model_validate(render_message(answer, "small", ()))
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens) == (2, 29)
    assert message.usage.cache_creation_input_tokens == 0
    stream = MessagesStream()
    out = stream.start("large", input_tokens=50)
    out += stream.chunk(chunk({"content": "42"}, "stop"))
    cached = {"prompt_tokens": 50, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 48}}
    out += stream.chunk(chunk(usage=cached))
    delta = next(e for e in parse_events(out + stream.finish()) if getattr(e, "type", "") == "message_delta")
    assert (delta.usage.input_tokens, delta.usage.cache_read_input_tokens) == (2, 48)
