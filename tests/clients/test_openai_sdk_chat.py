"""The openai SDK's chat and completions clients pointed at the gateway: sync, async, stream, tools,
structured output, tier by alias and by header (the Responses client: tests/gateway, branch of the
Responses edge)."""

from __future__ import annotations

import asyncio
import json

import pytest
from client_support import CLIENT_KEY, served, tool_call
from openai import AsyncOpenAI, OpenAI
from pydantic import BaseModel

from tests.support.scripted_upstream import Reply, ok

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def _client(gateway, **kw) -> OpenAI:
    return OpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0, **kw)


class Capital(BaseModel):
    country: str
    capital: str


@pytest.mark.compat(client="openai-sdk", feature="text")
def test_chat_sync_and_async(gateway, upstream) -> None:
    upstream.script("up-small", ok("Paris.", confidence=0.99), ok("Paris!", confidence=0.99))
    first = _client(gateway).chat.completions.create(model="cascade/balanced", messages=MESSAGES)

    async def ask() -> str | None:
        client = AsyncOpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
        answer = await client.chat.completions.create(model="cascade/balanced", messages=MESSAGES)
        return answer.choices[0].message.content

    assert first.choices[0].message.content == "Paris."
    assert asyncio.run(ask()) == "Paris!"
    assert served(gateway, "balanced", "accepted") == 2


@pytest.mark.compat(client="openai-sdk", feature="text")
def test_legacy_completions(gateway, upstream) -> None:
    upstream.script("up-small", ok("Paris.", confidence=0.99))
    answer = _client(gateway).completions.create(model="cascade/balanced", prompt="The capital of France is")
    assert answer.choices[0].text == "Paris."
    assert upstream.calls("up-small")[0].path == "/v1/completions"


@pytest.mark.compat(client="openai-sdk", feature="stream")
def test_chat_stream_of_an_escalated_answer(gateway, upstream) -> None:
    upstream.script("up-small", ok("Lyon?", confidence=0.3))
    upstream.script("up-large", ok("Paris is the capital.", confidence=0.99))
    stream = _client(gateway).chat.completions.create(
        model="cascade/balanced", messages=MESSAGES, stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "Paris is the capital."
    assert upstream.calls("up-large")[0].body["stream"] is True
    assert served(gateway, "balanced", "escalated") == 1


@pytest.mark.compat(client="openai-sdk", feature="tools")
def test_chat_tool_call_round_trip(gateway, upstream) -> None:
    call = tool_call("get_weather", {"city": "Paris"})
    upstream.script(
        "up-small", Reply(content=None, tool_calls=[call]), ok("Sunny in Paris.", confidence=0.99)
    )
    upstream.script("up-large", Reply(content=None, tool_calls=[call]))
    client = _client(gateway)
    asked = client.chat.completions.create(model="cascade/balanced", messages=MESSAGES, tools=[WEATHER_TOOL])
    message = asked.choices[0].message
    assert asked.choices[0].finish_reason == "tool_calls"
    assert message.tool_calls[0].function.name == "get_weather"
    assert json.loads(message.tool_calls[0].function.arguments) == {"city": "Paris"}
    result = {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "sunny"}
    history = [*MESSAGES, message.model_dump(exclude_none=True), result]
    final = client.chat.completions.create(model="cascade/balanced", messages=history, tools=[WEATHER_TOOL])
    assert final.choices[0].message.content == "Sunny in Paris."
    assert upstream.calls("up-small")[-1].body["messages"][-1] == result


@pytest.mark.compat(client="openai-sdk", feature="structured-output")
def test_chat_parse_with_a_pydantic_schema(gateway, upstream) -> None:
    upstream.script("up-small", ok('{"country": "France", "capital": "Paris"}', confidence=0.99))
    parsed = _client(gateway).chat.completions.parse(
        model="cascade/balanced", messages=MESSAGES, response_format=Capital
    )
    assert parsed.choices[0].message.parsed == Capital(country="France", capital="Paris")
    assert upstream.calls("up-small")[0].body["response_format"]["type"] == "json_schema"


@pytest.mark.compat(client="openai-sdk", feature="tier-by-alias")
def test_chat_alias_picks_the_tier(gateway, upstream) -> None:
    answer = _client(gateway).chat.completions.create(model="cascade/direct", messages=MESSAGES)
    assert answer.choices[0].message.content == "answer from up-large"
    assert upstream.calls("up-small") == []
    assert served(gateway, "direct", "direct") == 1


@pytest.mark.compat(client="openai-sdk", feature="tier-by-header")
def test_chat_tier_header_picks_the_tier(gateway, upstream) -> None:
    client = _client(gateway, default_headers={"X-Cascade-Tier": "direct"})
    answer = client.chat.completions.create(model="cascade", messages=MESSAGES)
    assert answer.choices[0].message.content == "answer from up-large"
    assert upstream.calls("up-small") == []
    assert served(gateway, "direct", "direct") == 1
