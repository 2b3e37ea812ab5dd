"""The OpenAI Agents SDK pointed at the gateway: an agent with one function tool, over the Responses
model (POST /v1/responses) and over the chat-completions model (POST /v1/chat/completions)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from client_support import CLIENT_KEY, served, streamed_tool_call, tool_call
from openai import AsyncOpenAI
from pydantic import BaseModel

from tests.support.scripted_upstream import Reply, ok

APIS = {"responses": OpenAIResponsesModel, "chat": OpenAIChatCompletionsModel}


@pytest.fixture(autouse=True)
def no_tracing() -> Iterator[None]:
    """The SDK exports traces to OpenAI by default: off (the tests run offline)."""
    set_tracing_disabled(True)
    yield
    set_tracing_disabled(False)


def _agent(
    gateway, api: str, model: str = "cascade/balanced", ran: list[str] | None = None, **client_kw
) -> Agent:
    client = AsyncOpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0, **client_kw)

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        if ran is not None:
            ran.append(city)
        return f"sunny in {city}"

    return Agent(
        name="weather", instructions="Answer briefly.", tools=[get_weather], model=APIS[api](model, client)
    )


def _script_tool_round_trip(upstream, streamed: bool = False) -> None:
    call = tool_call("get_weather", {"city": "Paris"})
    # The tool call has no content tokens to score: it escalates; the answer after the tool result
    # is confident and accepted at the cheap stage.
    upstream.script(
        "up-small", Reply(content=None, tool_calls=[call]), ok("It is sunny in Paris.", confidence=0.99)
    )
    upstream.script(
        "up-large", streamed_tool_call(call) if streamed else Reply(content=None, tool_calls=[call])
    )


def _tool_result_sent(upstream) -> list:
    """The tool outputs the gateway passed upstream on the turn after the call."""
    return [m for m in upstream.calls("up-small")[-1].body["messages"] if m.get("role") == "tool"]


@pytest.mark.compat(client="openai-agents", feature="text")
@pytest.mark.parametrize("api", ["responses", "chat"])
def test_agent_answers_through_the_cascade(gateway, upstream, api: str) -> None:
    upstream.script("up-small", ok("Paris.", confidence=0.99))
    result = Runner.run_sync(_agent(gateway, api), "What is the capital of France?")
    assert result.final_output == "Paris."
    sent = upstream.calls("up-small")[0].body
    assert sent["messages"][0] == {"role": "system", "content": "Answer briefly."}
    assert sent["messages"][-1]["role"] == "user"
    assert sent["tools"][0]["function"]["name"] == "get_weather"
    assert served(gateway, "balanced", "accepted") == 1


@pytest.mark.compat(client="openai-agents", feature="tools")
@pytest.mark.parametrize("api", ["responses", "chat"])
def test_agent_runs_its_function_tool(gateway, upstream, api: str) -> None:
    _script_tool_round_trip(upstream)
    ran: list[str] = []
    result = Runner.run_sync(_agent(gateway, api, ran=ran), "Weather in Paris?")
    assert result.final_output == "It is sunny in Paris."
    assert ran == ["Paris"]
    assert [m["content"] for m in _tool_result_sent(upstream)] == ["sunny in Paris"]
    assert served(gateway, "balanced", "escalated") == 1
    assert served(gateway, "balanced", "accepted") == 1


@pytest.mark.compat(client="openai-agents", feature="stream")
@pytest.mark.parametrize("api", ["responses", "chat"])
def test_streamed_run_with_a_tool_call(gateway, upstream, api: str) -> None:
    _script_tool_round_trip(upstream, streamed=True)
    ran: list[str] = []

    async def run() -> tuple[str, list[str]]:
        streamed = Runner.run_streamed(_agent(gateway, api, ran=ran), "Weather in Paris?")
        kinds = [event.type async for event in streamed.stream_events()]
        return str(streamed.final_output), kinds

    final, kinds = asyncio.run(run())
    assert final == "It is sunny in Paris."
    assert "raw_response_event" in kinds
    assert ran == ["Paris"]
    assert upstream.calls("up-large")[0].body["stream"] is True  # the escalated tool call came live
    assert [m["content"] for m in _tool_result_sent(upstream)] == ["sunny in Paris"]


@pytest.mark.compat(client="openai-agents", feature="tier-by-alias")
@pytest.mark.parametrize("api", ["responses", "chat"])
def test_model_alias_picks_the_tier(gateway, upstream, api: str) -> None:
    result = Runner.run_sync(_agent(gateway, api, "cascade/direct"), "What is the capital of France?")
    assert result.final_output == "answer from up-large"
    assert upstream.calls("up-small") == []
    assert served(gateway, "direct", "direct") == 1


@pytest.mark.compat(client="openai-agents", feature="tier-by-header")
@pytest.mark.parametrize("api", ["responses", "chat"])
def test_tier_header_picks_the_tier(gateway, upstream, api: str) -> None:
    agent = _agent(gateway, api, "cascade", default_headers={"X-Cascade-Tier": "direct"})
    assert Runner.run_sync(agent, "What is the capital of France?").final_output == "answer from up-large"
    assert upstream.calls("up-small") == []
    assert served(gateway, "direct", "direct") == 1


class Capital(BaseModel):
    country: str
    capital: str


@pytest.mark.compat(client="openai-agents", feature="structured-output")
@pytest.mark.parametrize("api", ["responses", "chat"])
def test_agent_output_type_is_parsed_from_the_json_schema_answer(gateway, upstream, api: str) -> None:
    upstream.script("up-small", ok('{"country": "France", "capital": "Paris"}', confidence=0.99))
    agent = _agent(gateway, api).clone(tools=[], output_type=Capital)
    result = Runner.run_sync(agent, "What is the capital of France?")
    assert result.final_output == Capital(country="France", capital="Paris")
    response_format = upstream.calls("up-small")[0].body["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["schema"]["required"] == ["country", "capital"]
