"""Every field the request parsers read, given any JSON value: a 400 naming it or a request, never
an exception the endpoint would have to turn into a 500 (generated bodies, hypothesis).

Each case starts from a valid body that reaches every parser branch (messages, tools, schemas,
content parts of every kind) and replaces the value at one path by an arbitrary JSON value."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.api.edges.messages import MessagesEdge
from gateway.api.edges.responses import ResponsesEdge
from gateway.wire.errors import BadRequestError
from gateway.wire.requests import check_client_schemas, parse_request

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "pattern": "^[A-Z]"}}}

RESPONSES_BODY: dict[str, Any] = {
    "model": "cascade",
    "instructions": "Be brief.",
    "input": [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "hi"},
                {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"},
            ],
        },
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": [{"type": "input_text", "text": "sunny"}],
        },
    ],
    "tools": [
        {"type": "function", "name": "get_weather", "description": "d", "parameters": SCHEMA, "strict": True}
    ],
    "tool_choice": {"type": "function", "name": "get_weather"},
    "parallel_tool_calls": True,
    "text": {
        "format": {"type": "json_schema", "name": "out", "schema": SCHEMA, "strict": True},
        "verbosity": "low",
    },
    "reasoning": {"effort": "low", "summary": None},
    "include": ["message.output_text.logprobs"],
    "top_logprobs": 2,
    "max_output_tokens": 50,
    "temperature": 0.5,
    "top_p": 0.9,
    "metadata": {"k": "v"},
    "stream": False,
    "store": False,
    "truncation": "disabled",
    "previous_response_id": None,
    "user": "u",
}
MESSAGES_BODY: dict[str, Any] = {
    "model": "cascade",
    "max_tokens": 50,
    "system": [{"type": "text", "text": "Be brief."}],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"},
                {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "sunny"}],
                    "is_error": False,
                },
            ],
        },
    ],
    "tools": [{"name": "get_weather", "description": "d", "input_schema": SCHEMA, "strict": True}],
    "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
    "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}, "effort": "low"},
    "stop_sequences": ["END"],
    "temperature": 0.5,
    "top_p": 0.9,
    "top_k": 5,
    "metadata": {"user_id": "u"},
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "stream": False,
}
CHAT_BODY: dict[str, Any] = {
    "model": "cascade",
    "messages": [{"role": "user", "content": "hi"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": SCHEMA}}],
    "response_format": {"type": "json_schema", "json_schema": {"name": "o", "schema": SCHEMA}},
    "logprobs": True,
    "top_logprobs": 2,
    "n": 1,
    "max_tokens": 5,
    "temperature": 0.1,
    "stream_options": {"include_usage": True},
}


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value in ``value`` (dict keys and list indexes), the root's children first."""
    found: list[tuple[Any, ...]] = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        found.append((*prefix, key))
        found.extend(_paths(child, (*prefix, key)))
    return found


def _replaced(body: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(body)
    node: Any = changed
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return changed


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.sampled_from(["user", "function", "message", "text", "json_schema", "#/x", "http://x/", "(?=a)"]),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)


def _translates_or_refuses(translate: Any, body: dict[str, Any]) -> None:
    try:
        raw = orjson.dumps(body)
    except orjson.JSONEncodeError:  # an integer orjson does not write: not a JSON body at all
        return
    try:
        translated = translate(raw)
        chat = translated.request.body
        if "tools" in chat or "response_format" in chat or "functions" in chat:
            check_client_schemas(chat)
    except BadRequestError:
        pass


CASES = {
    "responses": (RESPONSES_BODY, lambda raw: ResponsesEdge().translate(raw, "r")),
    "messages": (MESSAGES_BODY, lambda raw: MessagesEdge().translate(raw, "r")),
    "chat": (CHAT_BODY, lambda raw: _Parsed(parse_request(raw, "chat"))),
}


class _Parsed:
    def __init__(self, request: Any):
        self.request = request


@pytest.mark.parametrize("api", list(CASES))
def test_the_valid_base_body_is_accepted(api: str) -> None:
    body, translate = CASES[api]
    translate(orjson.dumps(body))


@pytest.mark.parametrize("api", list(CASES))
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_value_at_any_field_is_a_400_or_a_request(api: str, data: st.DataObject) -> None:
    body, translate = CASES[api]
    path = data.draw(st.sampled_from(_paths(body)))
    value = data.draw(JSON_VALUES)
    _translates_or_refuses(translate, _replaced(body, path, value))


@pytest.mark.parametrize("api", list(CASES))
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_a_field_removed_or_added_anywhere_is_a_400_or_a_request(api: str, data: st.DataObject) -> None:
    body, translate = CASES[api]
    path = data.draw(st.sampled_from(_paths(body)))
    changed = copy.deepcopy(body)
    node: Any = changed
    for key in path[:-1]:
        node = node[key]
    if isinstance(node, dict):
        del node[path[-1]]
    else:
        node.append(data.draw(JSON_VALUES))
    _translates_or_refuses(translate, changed)
