"""Structural checks live (gateway/stages/answer_review.py): one request per failure kind through the app
with the official openai SDK, in front of the scripted upstream. A scored stage's invalid answer
escalates whatever its score, with the check as its reason; a final stage's is returned and counted;
every escalation says why (header, /metrics)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionMessageToolCall

from gateway.stages.answer_review import missing_score_reason
from tests.support.gateway_logs import captured_request_lines
from tests.support.gateway_testkit import RunningGateway
from tests.support.scripted_upstream import Reply, error, ok

QUESTION = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]
WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
GOOD_ARGUMENTS = '{"city": "Paris", "unit": "celsius"}'
PERSON: Any = {
    "type": "json_schema",
    "json_schema": {
        "name": "person",
        "schema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name", "age"],
        },
    },
}


def call(name: str, arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    """An OpenAI ``tool_calls`` entry."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.fixture
def accepting(start_gateway, make_settings, write_policy) -> RunningGateway:
    """A gateway whose policy accepts an answer without a score (a pure tool call has none), so that
    only the checks can escalate a tool call."""
    return start_gateway(make_settings(write_policy(on_missing_score="accept")))


def counters(gateway: RunningGateway, tier: str, model: str, reason: str) -> tuple[float, float]:
    """(escalations of ``model`` with ``reason``, invalid answers of ``model`` failing ``reason``)."""
    return (
        gateway.sample("cascade_escalation_reasons_total", tier=tier, model=model, reason=reason),
        gateway.sample("cascade_invalid_answers_total", tier=tier, model=model, check=reason),
    )


CASES = {
    # failure kind: (cheap answer, extra request fields, check)
    "undeclared_function": (
        ok(None, tool_calls=[call("get_forecast", '{"city": "Paris"}')]),
        {"tools": [WEATHER]},
        "invalid_tool_call",
    ),
    "arguments_not_json": (
        ok(None, tool_calls=[call("get_weather", '{"city": "Paris"')]),
        {"tools": [WEATHER]},
        "invalid_tool_call",
    ),
    "schema_required": (
        ok(None, tool_calls=[call("get_weather", '{"unit": "celsius"}')]),
        {"tools": [WEATHER]},
        "invalid_tool_call",
    ),
    "schema_type": (
        ok(None, tool_calls=[call("get_weather", '{"city": 75}')]),
        {"tools": [WEATHER]},
        "invalid_tool_call",
    ),
    "schema_enum": (
        ok(None, tool_calls=[call("get_weather", '{"city": "Paris", "unit": "kelvin"}')]),
        {"tools": [WEATHER]},
        "invalid_tool_call",
    ),
    "call_when_tool_choice_none": (
        ok(None, tool_calls=[call("get_weather", GOOD_ARGUMENTS)]),
        {"tools": [WEATHER], "tool_choice": "none"},
        "invalid_tool_call",
    ),
    # A confident text answer (scored far above the threshold) that makes no call.
    "no_call_when_required": (
        ok("It is sunny in Paris.", confidence=0.99),
        {"tools": [WEATHER], "tool_choice": "required"},
        "invalid_tool_call",
    ),
    "structured_output_violates_schema": (
        ok('{"name": "Ada"}', confidence=0.99),
        {"response_format": PERSON},
        "invalid_structured_output",
    ),
}


@pytest.mark.parametrize("kind", list(CASES))
def test_an_invalid_cheap_answer_escalates_whatever_its_score(accepting, upstream, kind) -> None:
    cheap, fields, check = CASES[kind]
    if "tool_choice" in fields and fields["tool_choice"] == "none":
        final = ok("Sunny, 21 degrees.", confidence=0.99)
    elif "response_format" in fields:
        final = ok('{"name": "Ada", "age": 36}', confidence=0.99)
    else:
        final = ok(None, tool_calls=[call("get_weather", GOOD_ARGUMENTS, "call_big")])
    upstream.script("up-small", cheap)
    upstream.script("up-large", final)
    raw = accepting.client().chat.completions.with_raw_response.create(
        model="cascade", messages=QUESTION, **fields
    )
    completion: ChatCompletion = raw.parse()
    assert raw.headers["x-cascade-models-called"] == "small,large"
    assert raw.headers["x-cascade-escalation-reason"] == check
    if check == "invalid_structured_output":
        assert float(raw.headers["x-cascade-score"]) > 0.9  # the score would have kept it
    message = completion.choices[0].message
    if fields.get("tool_choice") == "none":
        assert message.content == "Sunny, 21 degrees." and not message.tool_calls
    elif "response_format" in fields:
        assert message.content == '{"name": "Ada", "age": 36}'
    else:
        (tool_call,) = message.tool_calls or []
        assert isinstance(tool_call, ChatCompletionMessageToolCall)
        assert tool_call.id == "call_big" and tool_call.function.arguments == GOOD_ARGUMENTS
    assert counters(accepting, "balanced", "small", check) == (1.0, 1.0)
    assert accepting.sample("cascade_invalid_answers_total", model="large") == 0.0
    assert accepting.sample("cascade_escalations_total", from_model="small", to_model="large") == 1.0


def test_a_valid_tool_call_is_kept_and_counts_nothing(accepting, upstream) -> None:
    upstream.script("up-small", ok(None, tool_calls=[call("get_weather", GOOD_ARGUMENTS)]))
    raw = accepting.client().chat.completions.with_raw_response.create(
        model="cascade", messages=QUESTION, tools=[WEATHER], tool_choice="required"
    )
    assert raw.headers["x-cascade-models-called"] == "small"
    assert raw.headers["x-cascade-escalation-reason"] == "none"
    assert raw.parse().choices[0].message.tool_calls[0].function.name == "get_weather"
    assert accepting.sample("cascade_invalid_answers_total", model="small") == 0.0
    assert accepting.sample("cascade_escalation_reasons_total", model="small") == 0.0


def test_a_final_stage_invalid_answer_is_returned_as_it_is_and_counted(accepting, upstream) -> None:
    upstream.script("up-small", ok(None, tool_calls=[call("get_forecast", "{}")]))
    upstream.script("up-large", ok(None, tool_calls=[call("get_weather", '{"city": 75}', "call_big")]))
    raw = accepting.client().chat.completions.with_raw_response.create(
        model="cascade", messages=QUESTION, tools=[WEATHER]
    )
    (tool_call,) = raw.parse().choices[0].message.tool_calls or []
    assert tool_call.id == "call_big" and tool_call.function.arguments == '{"city": 75}'  # as it is
    assert raw.headers["x-cascade-model"] == "large"
    assert counters(accepting, "balanced", "small", "invalid_tool_call") == (1.0, 1.0)
    assert counters(accepting, "balanced", "large", "invalid_tool_call") == (0.0, 1.0)
    # A single-model tier: the final stage is the only one; counted, never escalated.
    upstream.script("up-large", ok("Ada, 36", confidence=0.99))
    raw = accepting.client().chat.completions.with_raw_response.create(
        model="cascade/direct", messages=QUESTION, response_format=PERSON
    )
    assert raw.parse().choices[0].message.content == "Ada, 36"
    assert raw.headers["x-cascade-escalated"] == "false"
    assert counters(accepting, "direct", "large", "invalid_structured_output") == (0.0, 1.0)


def test_a_streamed_final_stage_invalid_answer_is_relayed_and_counted(accepting, upstream) -> None:
    base = {"id": "chunk", "object": "chat.completion.chunk", "created": 1, "model": "up-large"}
    pieces = [
        {"role": "assistant", "content": None},
        {
            "tool_calls": [
                {"index": 0, "id": "call_s", "type": "function", "function": {"name": "get_weather"}}
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Paris", '}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '"unit": "kelvin"}'}}]},
    ]
    events = [{**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in pieces]
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    upstream.script("up-large", Reply(stream_events=events))
    stream = accepting.client().chat.completions.create(
        model="cascade/direct", messages=QUESTION, tools=[WEATHER], stream=True
    )
    chunks = list(stream)
    arguments = "".join(
        fragment.function.arguments or ""
        for chunk in chunks
        for choice in chunk.choices
        for fragment in choice.delta.tool_calls or ()
        if fragment.function is not None
    )
    assert arguments == '{"city": "Paris", "unit": "kelvin"}'  # relayed live, as it is
    assert chunks[-1].model_extra["cascade"]["answer_problem"] == "invalid_tool_call"
    assert counters(accepting, "direct", "large", "invalid_tool_call") == (0.0, 1.0)


@pytest.mark.parametrize(
    ("cheap", "reason"),
    [
        ([ok("Maybe Lyon?", confidence=0.3)], "low_score"),
        ([ok("Paris.", confidence=None)], "no_logprobs"),
        ([ok("", confidence=0.99)], "empty_answer"),
        ([error(503)] * 3, "upstream_error"),  # the first try and both retries
    ],
)
def test_every_escalation_says_why(gateway, upstream, cheap, reason) -> None:
    upstream.script("up-small", *cheap)
    raw = gateway.client().chat.completions.with_raw_response.create(model="cascade", messages=QUESTION)
    assert raw.headers["x-cascade-escalation-reason"] == reason
    assert (
        gateway.sample("cascade_escalation_reasons_total", tier="balanced", model="small", reason=reason) == 1
    )
    assert gateway.sample("cascade_invalid_answers_total", model="small") == 0.0


def test_a_chain_records_each_escalation_in_order(gateway, upstream) -> None:
    upstream.script("up-small", error(500), error(500), error(500))
    upstream.script("up-medium", ok("Lyon?", confidence=0.3))
    raw = gateway.client().chat.completions.with_raw_response.create(model="cascade/chain", messages=QUESTION)
    assert raw.headers["x-cascade-escalation-reason"] == "upstream_error,low_score"
    assert (
        gateway.sample("cascade_escalation_reasons_total", tier="chain", model="medium", reason="low_score")
        == 1
    )


def test_an_invalid_cheap_answer_is_no_degraded_fallback(accepting, upstream) -> None:
    upstream.script("up-small", ok(None, tool_calls=[call("get_forecast", "{}")]))
    upstream.script("up-large", error(500), error(500))
    with pytest.raises(Exception) as failed:
        accepting.client().chat.completions.create(model="cascade", messages=QUESTION, tools=[WEATHER])
    assert getattr(failed.value, "status_code", None) == 502


@pytest.mark.parametrize(
    ("choice", "reason"),
    [
        ({"message": {"content": "Paris."}, "logprobs": None}, "no_logprobs"),
        ({"message": {"content": "Paris."}, "logprobs": {"content": []}}, "no_logprobs"),
        ({"message": {"content": None, "tool_calls": [call("f", "{}")]}}, "tool_call_only"),
        ({"message": {"content": "", "tool_calls": [call("f", "{}")]}}, "tool_call_only"),
        ({"message": {"content": "  "}}, "empty_answer"),
        ({"message": {}}, "empty_answer"),
        ({"text": "Paris", "logprobs": None}, "no_logprobs"),
        ({"text": ""}, "empty_answer"),
    ],
)
def test_missing_score_reason(choice, reason) -> None:
    assert missing_score_reason({"choices": [choice]}) == reason
    assert missing_score_reason({"choices": []}) == "empty_answer"


@pytest.mark.parametrize("log_prompts", [False, True])
def test_the_log_line_says_why_and_quotes_the_answer_only_with_prompts(
    start_gateway, make_settings, write_policy, upstream, capfd, log_prompts
) -> None:
    settings = make_settings(
        write_policy(on_missing_score="accept"), logging={"level": "info", "log_prompts": log_prompts}
    )
    gateway = start_gateway(settings)
    upstream.script(
        "up-small", ok(None, tool_calls=[call("get_weather", '{"city": "Paris", "unit": "kelvin"}')])
    )
    upstream.script("up-large", ok(None, tool_calls=[call("get_weather", GOOD_ARGUMENTS)]))
    gateway.client().chat.completions.create(model="cascade", messages=QUESTION, tools=[WEATHER])
    (line,) = captured_request_lines(capfd, 1)
    assert line["escalation_reasons"] == ["invalid_tool_call"]
    assert line["answer_problem"] is None  # the returned answer is valid
    (invalid,) = line["invalid_answers"]
    assert invalid["model"] == "small" and invalid["check"] == "invalid_tool_call"
    assert ("kelvin" in invalid.get("detail", "")) is log_prompts


def test_normalizing_replaces_the_choice_and_keeps_the_raw_one_intact() -> None:
    # The traffic sampler may hold the raw choice (what collection records); the client gets a copy.
    from gateway.config.settings import ModelConfig
    from gateway.stages.answer_review import AnswerReview
    from gateway.telemetry.metrics import GatewayMetrics
    from gateway.wire.facts import CascadeFacts
    from gateway.wire.requests import parse_request

    config = ModelConfig(
        base_url="http://127.0.0.1:1/v1",
        model="m",
        price={"per_query_usd": 0},
        capabilities={"tool_calls": "content"},
    )
    review = AnswerReview({"m": config}, GatewayMetrics())
    body = {"model": "cascade", "messages": QUESTION, "tools": [WEATHER]}
    request = parse_request(json.dumps(body).encode(), "chat")
    raw_choice = {
        "index": 0,
        "message": {
            "role": "assistant",
            "content": '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        },
        "finish_reason": "stop",
    }
    reply = {"choices": [raw_choice]}
    assert review.review("m", request, reply, CascadeFacts("balanced", None)) is None
    assert raw_choice["finish_reason"] == "stop" and raw_choice["message"]["content"].startswith('{"name"')
    served = reply["choices"][0]
    assert served["finish_reason"] == "tool_calls" and served["message"]["content"] is None
    assert served["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
