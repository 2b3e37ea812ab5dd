"""Structural checks of answers against their requests (policies.answer_checks): hand-written
accepted and rejected calls and structured outputs."""

from __future__ import annotations

import pytest

from policies.answer_checks import check_answer, declared_functions, schema_violation

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"},
            },
            "required": ["city"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}  # no parameters schema
REQUEST = {"messages": [{"role": "user", "content": "?"}], "tools": [WEATHER, TIME]}


def called(name: str, arguments: str) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": name, "arguments": arguments}}],
    }


@pytest.mark.parametrize(
    "message",
    [
        called("get_weather", '{"city": "Paris"}'),
        called("get_weather", '{"city": "Paris", "unit": "celsius", "days": 3}'),
        called("get_time", "{}"),
        called("get_time", ""),  # no arguments at all: llama.cpp sends "" for a call without any
        {
            "role": "assistant",
            "content": '{"name": "get_weather", "arguments": {"city": "Oslo"}}',
        },  # as content
        {"role": "assistant", "content": "It is sunny."},  # tool_choice auto: text is fine
    ],
)
def test_accepted_answers(message) -> None:
    assert check_answer(REQUEST, message) is None


@pytest.mark.parametrize(
    ("message", "detail"),
    [
        (called("get_forecast", '{"city": "Paris"}'), "'get_forecast', which the request does not declare"),
        (called("get_weather", '{"city": "Paris"'), "are not JSON"),
        (called("get_weather", '["Paris"]'), "are not a JSON object"),
        (called("get_weather", '{"unit": "celsius"}'), "'city' is a required property"),
        (called("get_weather", '{"city": 75}'), "city: 75 is not of type 'string'"),
        (called("get_weather", '{"city": "Paris", "unit": "kelvin"}'), "unit: 'kelvin' is not one of"),
        (called("get_weather", '{"city": "Paris", "days": 1.5}'), "days: 1.5 is not of type 'integer'"),
        ({"content": '{"name": "nope", "arguments": {}}'}, "'nope', which the request does not declare"),
    ],
)
def test_rejected_calls(message, detail) -> None:
    problem = check_answer(REQUEST, message)
    assert problem is not None and problem.kind == "invalid_tool_call"
    assert detail in problem.detail


def test_tool_choice_none_forbids_calls() -> None:
    request = {**REQUEST, "tool_choice": "none"}
    problem = check_answer(request, called("get_weather", '{"city": "Paris"}'))
    assert problem is not None and "tool_choice is none" in problem.detail
    assert check_answer(request, {"content": "Sunny."}) is None


def test_tool_choice_required_needs_a_call() -> None:
    request = {**REQUEST, "tool_choice": "required"}
    problem = check_answer(request, {"content": "Sunny."})
    assert problem is not None and "tool_choice is required" in problem.detail
    assert check_answer(request, called("get_time", "{}")) is None


def test_a_named_tool_choice_needs_a_call_to_that_function() -> None:
    request = {**REQUEST, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    assert "names 'get_weather'" in check_answer(request, {"content": "Sunny."}).detail
    assert "a call to 'get_time'" in check_answer(request, called("get_time", "{}")).detail
    assert check_answer(request, called("get_weather", '{"city": "Rome"}')) is None


def test_every_call_is_checked() -> None:
    message = called("get_weather", '{"city": "Paris"}')
    message["tool_calls"].append(
        {"id": "d", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    )
    problem = check_answer(REQUEST, message)
    assert problem is not None and "required" in problem.detail


def test_a_native_call_when_nothing_is_declared_is_invalid() -> None:
    problem = check_answer({"messages": []}, called("f", "{}"))
    assert problem is not None and problem.kind == "invalid_tool_call"


def test_call_shaped_content_without_declared_functions_is_text() -> None:
    content = '{"name": "Ada", "arguments": {"born": 1815}}'
    assert check_answer({"messages": []}, {"content": content}) is None
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
        "required": ["name", "arguments"],
    }
    request = {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    assert check_answer(request, {"content": content}) is None


PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
JSON_SCHEMA = {
    "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
}
JSON_OBJECT = {"response_format": {"type": "json_object"}}


@pytest.mark.parametrize(
    ("request_body", "content"),
    [
        (JSON_SCHEMA, '{"name": "Ada", "age": 36}'),
        (JSON_OBJECT, '{"anything": [1, 2]}'),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "n"}}}, "[1]"),  # no schema
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "null"}}}}, "null"),
        ({"response_format": {"type": "text"}}, "not json"),
    ],
)
def test_accepted_structured_outputs(request_body, content) -> None:
    assert check_answer(request_body, {"content": content}) is None


@pytest.mark.parametrize(
    ("request_body", "content", "detail"),
    [
        (JSON_SCHEMA, "Ada is 36.", "not JSON"),
        (JSON_SCHEMA, '```json\n{"name": "Ada", "age": 36}\n```', "not JSON"),
        (JSON_SCHEMA, '{"name": "Ada"}', "'age' is a required property"),
        (JSON_SCHEMA, '{"name": "Ada", "age": "36"}', "age: '36' is not of type 'integer'"),
        (JSON_SCHEMA, '{"name": "Ada", "age": 36, "x": 1}', "Additional properties"),
        (JSON_OBJECT, "[1, 2]", "not a JSON object"),
        (JSON_OBJECT, None, "not JSON"),
    ],
)
def test_rejected_structured_outputs(request_body, content, detail) -> None:
    problem = check_answer(request_body, {"content": content})
    assert problem is not None and problem.kind == "invalid_structured_output"
    assert detail in problem.detail


def test_declared_functions_skip_non_function_tools() -> None:
    request = {
        "tools": [WEATHER, {"type": "web_search"}, {"type": "function", "function": {"name": 3}}, "junk"]
    }
    assert list(declared_functions(request)) == ["get_weather"]


def test_an_invalid_schema_accepts_everything() -> None:
    # The client's own mistake must not fail the model's answer.
    assert schema_violation({"type": "no-such-type"}, {"a": 1}) is None
    assert schema_violation(None, 5) is None
    assert schema_violation({"type": "integer"}, "x") == "'x' is not of type 'integer'"


def test_a_schema_error_names_its_path_and_is_one_bounded_line() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "object", "properties": {"b": {"enum": ["x" * 300]}}}},
    }
    violation = schema_violation(schema, {"a": {"b": "y"}})
    assert violation is not None and violation.startswith("a/b: ") and len(violation) <= 200
