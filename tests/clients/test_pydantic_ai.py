"""pydantic-ai agents over the OpenAI chat model pointed at the gateway: text, stream, tools, typed output."""

from __future__ import annotations

import asyncio

import pytest
from client_support import CLIENT_KEY, served, tool_call
from openai import AsyncOpenAI
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.support.scripted_upstream import Reply, ok

QUESTION = "What is the capital of France?"


class Weather(BaseModel):
    city: str
    forecast: str


def _model(gateway, model: str = "cascade/balanced", **client_kw) -> OpenAIChatModel:
    client = AsyncOpenAI(base_url=gateway.url + "/v1", api_key=CLIENT_KEY, max_retries=0, **client_kw)
    return OpenAIChatModel(model, provider=OpenAIProvider(openai_client=client))


@pytest.mark.compat(client="pydantic-ai", feature="text")
def test_agent_answers_with_the_accepted_cheap_answer(gateway, upstream) -> None:
    upstream.script("up-small", ok("Paris.", confidence=0.99))
    result = Agent(_model(gateway), instructions="Answer briefly.").run_sync(QUESTION)
    assert result.output == "Paris."
    sent = upstream.calls("up-small")[0].body["messages"]
    assert sent == [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": QUESTION}]
    assert served(gateway, "balanced", "accepted") == 1


@pytest.mark.compat(client="pydantic-ai", feature="stream")
def test_agent_streams_the_escalated_answer(gateway, upstream) -> None:
    upstream.script("up-small", ok("Lyon?", confidence=0.3))
    upstream.script("up-large", ok("Paris is the capital.", confidence=0.99))

    async def stream() -> list[str]:
        async with Agent(_model(gateway)).run_stream(QUESTION) as run:
            return [delta async for delta in run.stream_text(delta=True)]

    deltas = asyncio.run(stream())
    assert "".join(deltas) == "Paris is the capital."
    assert upstream.calls("up-large")[0].body["stream"] is True
    assert served(gateway, "balanced", "escalated") == 1


@pytest.mark.compat(client="pydantic-ai", feature="tools")
@pytest.mark.compat(client="pydantic-ai", feature="structured-output")
def test_agent_with_a_tool_and_a_typed_result(gateway, upstream) -> None:
    agent = Agent(_model(gateway), output_type=Weather)
    ran: list[str] = []

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        ran.append(city)
        return "sunny"

    weather_call = tool_call("get_weather", {"city": "Paris"}, "call_w")
    final_call = tool_call("final_result", {"city": "Paris", "forecast": "sunny"}, "call_f")
    # Pure tool calls carry no content tokens to score: every turn escalates to the large model.
    upstream.script(
        "up-small",
        Reply(content=None, tool_calls=[weather_call]),
        Reply(content=None, tool_calls=[final_call]),
    )
    upstream.script(
        "up-large",
        Reply(content=None, tool_calls=[weather_call]),
        Reply(content=None, tool_calls=[final_call]),
    )

    result = agent.run_sync("Weather in Paris?")
    assert result.output == Weather(city="Paris", forecast="sunny")
    assert ran == ["Paris"]
    first, second = upstream.calls("up-large")
    assert {t["function"]["name"] for t in first.body["tools"]} == {"get_weather", "final_result"}
    assert second.body["messages"][-1] == {"role": "tool", "tool_call_id": "call_w", "content": "sunny"}
    assert served(gateway, "balanced", "escalated") == 2


@pytest.mark.compat(client="pydantic-ai", feature="tier-by-alias")
def test_model_alias_picks_the_tier(gateway, upstream) -> None:
    assert Agent(_model(gateway, "cascade/direct")).run_sync(QUESTION).output == "answer from up-large"
    assert upstream.calls("up-small") == []
    assert served(gateway, "direct", "direct") == 1


@pytest.mark.compat(client="pydantic-ai", feature="tier-by-header")
def test_tier_header_picks_the_tier(gateway, upstream) -> None:
    model = _model(gateway, "cascade", default_headers={"X-Cascade-Tier": "direct"})
    assert Agent(model).run_sync(QUESTION).output == "answer from up-large"
    assert upstream.calls("up-small") == []
    assert served(gateway, "direct", "direct") == 1
