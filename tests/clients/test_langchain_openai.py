"""langchain-openai's ChatOpenAI pointed at the gateway: invoke, stream, bind_tools, structured output."""

from __future__ import annotations

import pytest
from client_support import CLIENT_KEY, served, tool_call
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from tests.support.scripted_upstream import Reply, ok

QUESTION = "What is the capital of France?"


def _chat(gateway, model: str = "cascade/balanced", **kw) -> ChatOpenAI:
    return ChatOpenAI(base_url=gateway.url + "/v1", model=model, api_key=CLIENT_KEY, max_retries=0, **kw)


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


class Capital(BaseModel):
    country: str
    capital: str


@pytest.mark.compat(client="langchain-openai", feature="text")
def test_invoke_returns_the_accepted_cheap_answer(gateway, upstream) -> None:
    upstream.script("up-small", ok("Paris.", confidence=0.99))
    answer = _chat(gateway).invoke(QUESTION)
    assert answer.content == "Paris."
    assert answer.response_metadata["model_name"] == "small"
    sent = upstream.calls("up-small")[0].body
    assert sent["messages"] == [{"role": "user", "content": QUESTION}]
    assert served(gateway, "balanced", "accepted") == 1


@pytest.mark.compat(client="langchain-openai", feature="stream")
def test_stream_yields_the_escalated_answer_live(gateway, upstream) -> None:
    upstream.script("up-small", ok("Lyon?", confidence=0.3))
    upstream.script("up-large", ok("Paris is the capital.", confidence=0.99))
    chunks = list(_chat(gateway).stream(QUESTION))
    assert "".join(str(c.content) for c in chunks) == "Paris is the capital."
    assert len([c for c in chunks if c.content]) == 4  # one chunk per streamed token
    assert upstream.calls("up-large")[0].body["stream"] is True
    assert served(gateway, "balanced", "escalated") == 1


@pytest.mark.compat(client="langchain-openai", feature="tools")
def test_bind_tools_round_trip(gateway, upstream) -> None:
    call = tool_call("get_weather", {"city": "Paris"})
    # A pure tool call has no content tokens to score: the cascade escalates it (on_missing_score).
    upstream.script("up-small", Reply(content=None, tool_calls=[call]))
    upstream.script("up-large", Reply(content=None, tool_calls=[call]))
    llm = _chat(gateway).bind_tools([get_weather])
    question = HumanMessage("Weather in Paris?")
    asked = llm.invoke([question])
    assert asked.tool_calls == [
        {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1", "type": "tool_call"}
    ]
    assert upstream.calls("up-small")[0].body["tools"][0]["function"]["name"] == "get_weather"

    upstream.script("up-small", ok("It is sunny in Paris.", confidence=0.99))
    result = get_weather.invoke(asked.tool_calls[0])
    assert isinstance(result, ToolMessage)
    final = llm.invoke([question, asked, result])
    assert final.content == "It is sunny in Paris."
    sent = upstream.calls("up-small")[-1].body["messages"]
    assert sent[-1] == {"role": "tool", "content": "sunny in Paris", "tool_call_id": "call_1"}
    assert sent[-2]["tool_calls"][0]["function"]["name"] == "get_weather"


@pytest.mark.compat(client="langchain-openai", feature="structured-output")
def test_with_structured_output_parses_the_json_schema_answer(gateway, upstream) -> None:
    upstream.script("up-small", ok('{"country": "France", "capital": "Paris"}', confidence=0.99))
    answer = _chat(gateway).with_structured_output(Capital).invoke(QUESTION)
    assert answer == Capital(country="France", capital="Paris")
    response_format = upstream.calls("up-small")[0].body["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["schema"]["required"] == ["country", "capital"]


@pytest.mark.compat(client="langchain-openai", feature="tier-by-alias")
def test_model_alias_picks_the_tier(gateway, upstream) -> None:
    answer = _chat(gateway, model="cascade/direct").invoke(QUESTION)
    assert answer.content == "answer from up-large"
    assert upstream.calls("up-small") == []
    assert served(gateway, "direct", "direct") == 1


@pytest.mark.compat(client="langchain-openai", feature="tier-by-header")
def test_tier_header_picks_the_tier(gateway, upstream) -> None:
    llm = _chat(gateway, model="cascade", default_headers={"X-Cascade-Tier": "direct"})
    assert llm.invoke(QUESTION).content == "answer from up-large"
    assert upstream.calls("up-small") == []
    assert served(gateway, "direct", "direct") == 1
