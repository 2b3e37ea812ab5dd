"""``POST /v1/responses`` through the cascade, driven by the official openai SDK (``client.responses``).

The scripted upstream answers the chat-completions stages; what it received shows the translation
(instructions and items as messages, tools, text.format as response_format), what the SDK parsed
shows the answer's shape (output items, usage, status).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import BaseModel

from tests.support.scripted_upstream import ok

SDK = "openai-sdk"
QUESTION = "What is the capital of France?"
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
WEATHER_CALL = {
    "id": "call_w1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}


@pytest.mark.compat(client=SDK, feature="text")
def test_text_answer_accepted_by_the_cheap_model(gateway, upstream) -> None:
    upstream.script("up-small", ok("Paris.", confidence=0.99))
    raw = gateway.client().responses.with_raw_response.create(
        model="cascade", input=QUESTION, instructions="Answer in one word.", metadata={"case": "a"}
    )
    response = raw.parse()
    assert response.output_text == "Paris."
    assert response.status == "completed" and response.object == "response"
    assert response.model == "small"
    assert response.id == "resp_" + raw.headers["x-request-id"]
    assert response.instructions == "Answer in one word."
    assert response.metadata == {"case": "a"}
    assert response.store is False
    (item,) = response.output
    assert item.type == "message" and item.role == "assistant" and item.status == "completed"
    assert item.content[0].type == "output_text" and item.content[0].text == "Paris."
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (10, 5, 15)
    assert usage.input_tokens_details.cached_tokens == 0
    assert usage.output_tokens_details.reasoning_tokens == 0
    headers = raw.headers
    assert headers["x-cascade-tier"] == "balanced"
    assert headers["x-cascade-model"] == "small" and headers["x-cascade-escalated"] == "false"
    assert float(headers["x-cascade-score"]) > 0.5
    sent = upstream.calls("up-small")[0].body
    assert sent["messages"] == [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": QUESTION},
    ]
    assert sent["logprobs"] is True and sent["top_logprobs"] == 5  # the scored stage
    assert "metadata" not in sent and "input" not in sent and "instructions" not in sent


@pytest.mark.compat(client=SDK, feature="text")
def test_escalated_answer_comes_from_the_large_model(gateway, upstream) -> None:
    upstream.script("up-small", ok("Lyon?", confidence=0.3))
    upstream.script("up-large", ok("Paris, of course."))
    raw = gateway.client().responses.with_raw_response.create(model="cascade", input=QUESTION)
    assert raw.parse().output_text == "Paris, of course."
    assert raw.parse().model == "large"
    assert raw.headers["x-cascade-escalated"] == "true"
    assert raw.headers["x-cascade-models-called"] == "small,large"


@pytest.mark.compat(client=SDK, feature="text")
def test_async_client(gateway, upstream) -> None:
    upstream.script("up-small", ok("Paris.", confidence=0.99))

    async def ask() -> str:
        async with gateway.async_client() as client:
            response = await client.responses.create(model="cascade", input=QUESTION)
            return response.output_text

    assert asyncio.run(ask()) == "Paris."


@pytest.mark.compat(client=SDK, feature="tier-by-alias")
def test_tier_by_model_alias(gateway, upstream) -> None:
    upstream.script("up-large", ok("Paris."))
    raw = gateway.client().responses.with_raw_response.create(model="cascade/direct", input=QUESTION)
    assert raw.headers["x-cascade-tier"] == "direct"
    assert raw.headers["x-cascade-models-called"] == "large"
    assert not upstream.calls("up-small")


@pytest.mark.compat(client=SDK, feature="tier-by-header")
def test_tier_by_header(gateway, upstream) -> None:
    upstream.script("up-small", ok("Paris.", confidence=0.99))
    raw = gateway.client().responses.with_raw_response.create(
        model="cascade", input=QUESTION, extra_headers={"X-Cascade-Tier": "chain"}
    )
    assert raw.headers["x-cascade-tier"] == "chain"
    assert raw.parse().output_text == "Paris."


def test_sampling_fields_and_output_cap_reach_the_upstream(gateway, upstream) -> None:
    upstream.script("up-large", ok("Paris is the capital of France."))
    response = gateway.client().responses.create(
        model="large", input=QUESTION, temperature=0.25, top_p=0.5, max_output_tokens=7
    )
    assert response.temperature == 0.25 and response.top_p == 0.5 and response.max_output_tokens == 7
    sent = upstream.calls("up-large")[0].body
    assert (sent["temperature"], sent["top_p"], sent["max_tokens"]) == (0.25, 0.5, 7)


def test_an_answer_cut_by_the_output_cap_is_incomplete(gateway, upstream) -> None:
    body = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "up-large",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Par"}, "finish_reason": "length"}
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10},
    }
    upstream.script("up-large", ok(body=body))
    response = gateway.client().responses.create(model="large", input=QUESTION, max_output_tokens=1)
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "Par"


@pytest.mark.compat(client=SDK, feature="tools")
def test_function_call_out_and_its_output_back_in(gateway, upstream) -> None:
    client = gateway.client()
    upstream.script("up-large", ok(content=None, tool_calls=[WEATHER_CALL]))
    first = client.responses.create(model="cascade/direct", input="Weather in Paris?", tools=[WEATHER_TOOL])
    (call,) = first.output
    assert call.type == "function_call" and call.status == "completed"
    assert (call.call_id, call.name, json.loads(call.arguments)) == (
        "call_w1",
        "get_weather",
        {"city": "Paris"},
    )
    sent = upstream.calls("up-large")[0].body
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": WEATHER_TOOL["parameters"],
                "strict": True,
            },
        }
    ]
    upstream.script("up-large", ok("Sunny in Paris."))
    history = [
        {"role": "user", "content": "Weather in Paris?"},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
    ]
    second = client.responses.create(
        model="cascade/direct", input=history, tools=[WEATHER_TOOL], tool_choice="auto"
    )
    assert second.output_text == "Sunny in Paris."
    sent = upstream.calls("up-large")[1].body
    assert sent["messages"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_w1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_w1", "content": "sunny"},
    ]
    assert sent["tool_choice"] == "auto"


def test_a_named_tool_choice_and_parallel_calls_are_mapped(gateway, upstream) -> None:
    upstream.script("up-large", ok(content=None, tool_calls=[WEATHER_CALL]))
    gateway.client().responses.create(
        model="large",
        input="Weather in Paris?",
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
    )
    sent = upstream.calls("up-large")[0].body
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert sent["parallel_tool_calls"] is False


class City(BaseModel):
    name: str
    country: str


@pytest.mark.compat(client=SDK, feature="structured-output")
def test_text_format_json_schema_is_the_chat_response_format(gateway, upstream) -> None:
    upstream.script("up-large", ok('{"name": "Paris", "country": "France"}'))
    parsed = gateway.client().responses.parse(model="cascade/direct", input=QUESTION, text_format=City)
    assert parsed.output_parsed == City(name="Paris", country="France")
    response_format = upstream.calls("up-large")[0].body["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["name"] == "City"
    assert response_format["json_schema"]["strict"] is True
    assert response_format["json_schema"]["schema"]["properties"].keys() == {"name", "country"}


def test_message_items_with_parts_and_roles_become_chat_messages(gateway, upstream) -> None:
    upstream.script("up-large", ok("Berlin."))
    items = [
        {
            "type": "message",
            "id": "msg_a",
            "role": "developer",
            "content": [{"type": "input_text", "text": "Be brief."}],
        },
        {"role": "user", "content": "Capital of France?"},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_b",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Paris.", "annotations": []}],
        },
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "And "}, {"type": "input_text", "text": "Germany?"}],
        },
    ]
    gateway.client().responses.create(model="large", input=items)
    assert upstream.calls("up-large")[0].body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And Germany?"},
    ]


def test_output_text_logprobs_when_included(gateway, upstream) -> None:
    upstream.script("up-large", ok("Paris is", confidence=0.9))
    response = gateway.client().responses.create(
        model="large", input=QUESTION, include=["message.output_text.logprobs"], top_logprobs=2
    )
    logprobs = response.output[0].content[0].logprobs
    assert [entry.token for entry in logprobs] == ["Paris", " is"]
    assert all(len(entry.top_logprobs) == 2 for entry in logprobs)
    sent = upstream.calls("up-large")[0].body
    assert sent["logprobs"] is True and sent["top_logprobs"] == 2
