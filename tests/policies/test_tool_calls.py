"""Request kinds and the calls an answer makes, native or written as content (policies.tool_calls)."""

from __future__ import annotations

import orjson
import pytest

from policies.tool_calls import ToolCall, answer_calls, calls_in_content, normalize_message, request_kind

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ({"messages": MESSAGES}, "text"),
        ({"messages": MESSAGES, "tools": TOOLS}, "tool_call"),
        ({"messages": MESSAGES, "tools": TOOLS, "tool_choice": "required"}, "tool_call"),
        ({"messages": MESSAGES, "tools": TOOLS, "tool_choice": "none"}, "text"),
        ({"messages": MESSAGES, "tools": []}, "text"),
        ({"messages": MESSAGES, "response_format": {"type": "json_object"}}, "structured_output"),
        (
            {"messages": MESSAGES, "response_format": {"type": "json_schema", "json_schema": {}}},
            "structured_output",
        ),
        ({"messages": MESSAGES, "response_format": {"type": "text"}}, "text"),
        # Tools win: a request that may call is a tool-call request even with a JSON format.
        ({"messages": MESSAGES, "tools": TOOLS, "response_format": {"type": "json_object"}}, "tool_call"),
    ],
)
def test_request_kind(body, kind) -> None:
    assert request_kind(body) == kind


def test_native_tool_calls_are_the_calls_even_with_content() -> None:
    message = {
        "content": '{"name": "other", "arguments": {}}',
        "tool_calls": [
            {
                "id": "a",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }
    assert answer_calls(message) == [ToolCall("get_weather", '{"city": "Paris"}')]


def test_native_arguments_sent_as_an_object_are_kept_as_json_text() -> None:
    message = {"tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]}
    assert answer_calls(message) == [ToolCall("f", '{"x":1}')]


def test_a_malformed_native_entry_is_a_call_without_name() -> None:
    assert answer_calls({"tool_calls": ["junk"]}) == [ToolCall("", "")]


@pytest.mark.parametrize(
    ("content", "calls"),
    [
        # Qwen2.5-Coder-0.5B behind llama-server: bare JSON.
        ('{"name": "get_weather", "arguments": {"city": "Paris"}}', [("get_weather", {"city": "Paris"})]),
        # Qwen2.5-Coder-1.5B: inside a json fence.
        (
            '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',
            [("get_weather", {"city": "Paris"})],
        ),
        # Hermes-style tags, two calls.
        (
            '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n'
            '<tool_call>\n{"name": "b", "arguments": {"x": 1}}\n</tool_call>',
            [("a", {}), ("b", {"x": 1})],
        ),
        # A list, and objects one after another; "parameters" read as "arguments".
        (
            '[{"name": "a", "arguments": {}}, {"name": "b", "parameters": {"y": 2}}]',
            [("a", {}), ("b", {"y": 2})],
        ),
        ('{"name": "a", "arguments": {}}\n{"name": "b", "arguments": {}}', [("a", {}), ("b", {})]),
        # Arguments written as a JSON string are kept as that text.
        ('{"name": "a", "arguments": "{\\"x\\": 1}"}', [("a", {"x": 1})]),
        # The outer braces doubled, as the local Qwen2.5-Coder models write it; bare and fenced.
        (
            '{{"name": "get_weather", "arguments": {"city": "Paris"}}}',
            [("get_weather", {"city": "Paris"})],
        ),
        (
            '```json\n{{"name": "get_weather", "arguments": {"city": "Paris"}}}\n```',
            [("get_weather", {"city": "Paris"})],
        ),
    ],
)
def test_calls_written_as_content_are_read(content, calls) -> None:
    found = calls_in_content(content)
    assert found is not None
    assert [(c.name, c.parsed_arguments()) for c in found] == calls


@pytest.mark.parametrize(
    "content",
    [
        "",
        "The weather in Paris is sunny.",
        'Here is the call: {"name": "get_weather", "arguments": {}}',  # text around it
        '```json\n{"name": "a", "arguments": {}}\n```\nDone.',
        '{"name": "a", "arguments": {}, "extra": 1}',  # not only call keys: some JSON answer
        '{"city": "Paris"}',  # no name
        '{"name": 3, "arguments": {}}',
        "[]",
        '```python\nprint("hi")\n```',
        '[{"name": "a", "arguments": {}}, 5]',
        # Doubled braces are stripped once, around one whole object only.
        '{{{"name": "a", "arguments": {}}}}',
        '{{"name": "a", "arguments": {}}} and more',
        "{{}}",
    ],
)
def test_other_content_is_no_call(content) -> None:
    assert calls_in_content(content) is None
    assert answer_calls({"content": content}) == []


def test_content_is_not_read_when_told_not_to() -> None:
    message = {"content": '{"name": "a", "arguments": {}}'}
    assert answer_calls(message, in_content=False) == []
    assert answer_calls(message) == [ToolCall("a", "{}")]


def test_normalize_moves_calls_into_tool_calls_with_unique_ids() -> None:
    message = {
        "role": "assistant",
        "content": '{"name": "a", "arguments": {"x": 1}}\n{"name": "b", "arguments": {}}',
    }
    assert normalize_message(message) is True
    assert message["content"] is None
    first, second = message["tool_calls"]
    assert first["type"] == "function" and first["function"] == {"name": "a", "arguments": '{"x":1}'}
    assert second["function"]["name"] == "b"
    assert first["id"].startswith("call_") and first["id"] != second["id"]
    assert orjson.loads(first["function"]["arguments"]) == {"x": 1}


@pytest.mark.parametrize(
    "message",
    [
        {"content": "plain text"},
        {"content": None},
        {"content": '{"name": "a", "arguments": {}}', "tool_calls": [{"function": {"name": "b"}}]},
    ],
)
def test_normalize_leaves_other_messages_alone(message) -> None:
    before = orjson.dumps(message)
    assert normalize_message(message) is False
    assert orjson.dumps(message) == before


@pytest.mark.parametrize(
    "content",
    [
        "<tool_call>" * 20_000,
        "<tool_call>x</tool_call>" + "<tool_call>" * 20_000,
        "```" + "```json\n" * 20_000,
        "<tool_call>" + "{" * 50_000,
    ],
)
def test_content_parsing_is_linear_in_unclosed_blocks(content: str) -> None:
    import time

    started = time.perf_counter()
    assert calls_in_content(content) is None
    assert time.perf_counter() - started < 1.0  # the lazy regexes took 24 s and more on 20,000 tags


@pytest.mark.parametrize("depth", [300, 1_100, 5_000])
def test_a_call_nested_past_the_json_parsers_is_no_call(depth: int) -> None:
    nested = "[" * depth + "]" * depth
    assert calls_in_content('{"name": "f", "arguments": {"x": ' + nested + "}}") is None
    assert calls_in_content("{" * depth) is None


def test_blocks_keep_their_meaning() -> None:
    call = '{"name": "f", "arguments": {"a": 1}}'
    assert [
        c.name
        for c in calls_in_content(f"<tool_call>\n{call}\n</tool_call>\n<tool_call>{call}</tool_call>") or []
    ] == ["f", "f"]
    assert [c.name for c in calls_in_content(f"```json\n{call}\n```") or []] == ["f"]
    assert calls_in_content(f"Sure: <tool_call>{call}</tool_call>") is None
    assert calls_in_content(f"<tool_call>{call}</tool_call> done") is None
