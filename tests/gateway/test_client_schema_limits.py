"""A client's schema cannot stall the gateway, through the real app with the official SDKs' wire
shapes: a schema past any stated limit is a 400 in each API's shape on every carrier (chat tool
``parameters`` and ``response_format``, Responses ``text.format``, Messages ``input_schema``),
nothing sent upstream; the largest accepted schemas check big answers, and an answer whose check
passes its budget is a failed check (escalated from a cheap stage, charged as usual)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from policies.schema_limits import MAX_BRANCHES, MAX_DEFS, MAX_SCHEMA_NODES
from tests.support.gateway_testkit import RunningGateway
from tests.support.hostile_schemas import OVER_LIMITS, array_of, branches, defs, subschemas
from tests.support.scripted_upstream import Reply, ok

QUESTION = [{"role": "user", "content": "Return the items."}]
# The default body limit (the tests' gateway keeps 64 KiB): a schema past a limit still arrives.
LIMITS = {"max_body_bytes": 1_048_576, "request_timeout_s": 10}


@pytest.fixture
def gateway(start_gateway, make_settings, write_policy) -> RunningGateway:
    """A gateway taking bodies up to 1 MiB whose policy accepts an answer without a score (so that
    only the checks can escalate)."""
    return start_gateway(make_settings(write_policy(on_missing_score="accept"), limits=LIMITS))


def _chat_tool(schema: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
    return "/v1/chat/completions", {"model": "cascade", "messages": QUESTION, "tools": [tool]}


def _chat_format(schema: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    response_format = {"type": "json_schema", "json_schema": {"name": "items", "schema": schema}}
    return "/v1/chat/completions", {
        "model": "cascade",
        "messages": QUESTION,
        "response_format": response_format,
    }


def _responses_format(schema: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    text = {"format": {"type": "json_schema", "name": "items", "schema": schema}}
    return "/v1/responses", {"model": "cascade", "input": "Return the items.", "text": text}


def _messages_tool(schema: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    tools = [{"name": "f", "input_schema": schema}]
    return "/v1/messages", {"model": "cascade", "max_tokens": 50, "messages": QUESTION, "tools": tools}


CARRIERS = {
    "chat_tool": _chat_tool,
    "chat_format": _chat_format,
    "responses_format": _responses_format,
    "messages_tool": _messages_tool,
}


@pytest.mark.parametrize("carrier", sorted(CARRIERS))
def test_a_schema_over_each_limit_is_a_400_in_the_api_s_shape(gateway, upstream, carrier) -> None:
    for limit, (schema, words) in OVER_LIMITS.items():
        path, body = CARRIERS[carrier]({**schema, "type": "object"})
        response = gateway.http.post(path, json=body, timeout=30)
        assert response.status_code == 400, (limit, response.text)
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error", limit
        assert words in error["message"], (limit, error["message"])
        if carrier != "messages_tool":
            assert error["code"] == "invalid_schema", limit
        else:
            assert response.json()["type"] == "error"
    assert upstream.requests == []


def test_the_limits_are_shared_by_a_request_s_tools(gateway, upstream) -> None:
    half = defs(MAX_DEFS // 2 + 1)
    tools = [{"type": "function", "function": {"name": f"f{i}", "parameters": half}} for i in range(2)]
    body = {"model": "cascade", "messages": QUESTION, "tools": tools}
    response = gateway.http.post("/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "tools[1].function.parameters"
    assert upstream.requests == []


def _calls(*arguments: Any) -> Reply:
    tool_calls = [
        {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": f"f{i}", "arguments": orjson.dumps(a).decode()},
        }
        for i, a in enumerate(arguments)
    ]
    return Reply(content=None, tool_calls=tool_calls)


def test_the_largest_accepted_schemas_check_a_big_answer(gateway: RunningGateway, upstream) -> None:
    # The subschema limit spread over four tools, an answer calling all four, one violating its schema.
    largest = subschemas(MAX_SCHEMA_NODES // 4)
    tools = [{"type": "function", "function": {"name": f"f{i}", "parameters": largest}} for i in range(4)]
    arguments = {f"p{i}": "v" for i in range(500)}
    upstream.script("up-large", _calls(*[arguments] * 4), _calls(*[arguments] * 3, {"p7": 7}))
    for expected in (0, 1):
        completion = gateway.client().chat.completions.create(
            model="cascade/direct",
            messages=QUESTION,  # type: ignore[arg-type]
            tools=tools,  # type: ignore[arg-type]
        )
        assert len(completion.choices[0].message.tool_calls or []) == 4
        assert (
            gateway.sample("cascade_invalid_answers_total", model="large", check="invalid_tool_call")
            == expected
        )


def test_a_cheap_answer_past_the_check_s_budget_escalates_and_is_charged(gateway, upstream) -> None:
    widest = array_of(branches(MAX_BRANCHES))
    response_format: Any = {"type": "json_schema", "json_schema": {"name": "items", "schema": widest}}
    last = {"kind": f"k{MAX_BRANCHES - 1}"}
    upstream.script("up-small", ok(orjson.dumps({"items": [last] * 2_000}).decode()))
    upstream.script("up-large", ok(orjson.dumps({"items": [last]}).decode()))
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="cascade", messages=QUESTION, response_format=response_format
    )
    assert raw.headers["x-cascade-models-called"] == "small,large"
    assert raw.headers["x-cascade-escalation-reason"] == "invalid_structured_output"
    assert orjson.loads(raw.parse().choices[0].message.content or "") == {"items": [last]}
    assert gateway.sample("cascade_cost_usd_total", model="small") > 0
