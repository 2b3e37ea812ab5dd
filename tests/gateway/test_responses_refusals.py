"""What ``/v1/responses`` refuses (a 400 naming the field, never a silently dropped field) and the
hints it accepts without forwarding (what Codex CLI and the Agents SDK send routinely)."""

from __future__ import annotations

import openai
import pytest

from tests.support.scripted_upstream import ok

SDK = "openai-sdk"
QUESTION = "What is the capital of France?"


def refusal(gateway, **fields) -> dict:
    """The OpenAI error body of a request the gateway refuses (SDK: BadRequestError)."""
    with pytest.raises(openai.BadRequestError) as caught:
        gateway.client().responses.create(**{"model": "cascade", "input": QUESTION, **fields})
    return caught.value.body


@pytest.mark.compat(
    client=SDK,
    feature="tools",
    refused="built-in tools (web_search, file_search, ...) run on OpenAI's servers",
)
def test_built_in_tools_are_refused_by_name(gateway, upstream) -> None:
    body = refusal(gateway, tools=[{"type": "web_search"}])
    assert body["code"] == "unsupported_parameter" and body["param"] == "tools[0]"
    assert "web_search" in body["message"]
    body = refusal(
        gateway,
        tools=[
            {"type": "function", "name": "f", "parameters": {}},
            {"type": "file_search", "vector_store_ids": ["v"]},
        ],
    )
    assert body["param"] == "tools[1]" and "file_search" in body["message"]
    assert not upstream.calls()


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id", "keeps no responses"),
        ({"store": True}, "store", "keeps no responses"),
        ({"conversation": "conv_1"}, "conversation", "keeps no conversations"),
        ({"background": True}, "background", "stored responses"),
        ({"truncation": "auto"}, "truncation", "cannot drop input"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt", "templates"),
        ({"include": ["message.made_up"]}, "include", "message.made_up"),
        ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice", "web_search_preview"),
        ({"text": {"format": {"type": "grammar"}}}, "text.format", "grammar"),
        ({"reasoning": {"effort": "low", "budget": 3}}, "reasoning.budget", "not supported"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]", "stored responses"),
        ({"input": [{"type": "reasoning", "id": "rs_1", "summary": []}]}, "input[0]", "reasoning items"),
        ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0]", "web_search_call"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]},
            "input[0].content[0]",
            "input_file",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file_1"}]}]},
            "input[0].content[0]",
            "image_url",
        ),
    ],
)
def test_what_cannot_be_honoured_is_a_clear_400(gateway, upstream, fields, param, words) -> None:
    body = refusal(gateway, **fields)
    assert body["param"] == param
    assert words in body["message"]
    assert body["type"] == "invalid_request_error"
    assert not upstream.calls()


def test_an_unknown_field_is_refused_by_name(gateway, upstream) -> None:
    body = refusal(gateway, extra_body={"frobnicate": 1})
    assert body["param"] == "frobnicate" and body["code"] == "unsupported_parameter"


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        ({"input": QUESTION}, "model"),
        ({"model": "cascade"}, "input"),
        ({"model": "cascade", "input": []}, "input"),
        ({"model": "cascade", "input": [{"role": "robot", "content": "hi"}]}, "input[0].role"),
        ({"model": "cascade", "input": [{"role": "user", "content": []}]}, "input[0].content"),
        ({"model": "cascade", "input": [{"type": "function_call", "name": "f"}]}, "input[0].call_id"),
        ({"model": "cascade", "input": QUESTION, "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": "cascade", "input": QUESTION, "temperature": "hot"}, "temperature"),
        ({"model": "cascade", "input": QUESTION, "metadata": {"k": 1}}, "metadata"),
        ({"model": "cascade", "input": QUESTION, "stream": "yes"}, "stream"),
    ],
)
def test_malformed_requests_name_the_field(gateway, upstream, payload, param) -> None:
    response = gateway.http.post("/v1/responses", json=payload, timeout=10)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param
    assert response.headers["x-request-id"]


def test_routing_errors_keep_the_openai_shape(gateway, upstream) -> None:
    response = gateway.http.post(
        "/v1/responses", json={"model": "cascade/no-such-tier", "input": QUESTION}, timeout=10
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == "unknown_tier"
    response = gateway.http.post("/v1/responses", json={"model": "gpt-9", "input": QUESTION}, timeout=10)
    assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found"
    assert gateway.http.get("/v1/responses", timeout=10).status_code == 405


def test_what_codex_sends_is_served(gateway, upstream) -> None:
    # The fields of a captured Codex CLI request (notes: store false, include of encrypted reasoning,
    # reasoning summary, developer messages with ids, strict: false tools, client_metadata).
    upstream.script("up-small", ok("Hello!", confidence=0.99))
    body = {
        "model": "cascade/balanced",
        "stream": True,
        "input": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "developer",
                "content": [{"type": "input_text", "text": "You are Codex."}],
            },
            {
                "type": "message",
                "id": "msg_2",
                "role": "user",
                "content": [{"type": "input_text", "text": "Say hello"}],
            },
        ],
        "tools": [
            {
                "type": "function",
                "name": "exec_command",
                "description": "Run",
                "strict": False,
                "parameters": {"type": "object", "properties": {}},
            }
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"summary": "auto"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "3f1c9a52-session",
        "client_metadata": {"originator": "codex_exec"},
    }
    with gateway.http.stream("POST", "/v1/responses", json=body, timeout=20) as response:
        text = response.read().decode()
    assert response.status_code == 200, text
    assert "event: response.completed" in text and "Hello!" in text
    sent = upstream.calls("up-small")[0].body
    assert sent["messages"] == [
        {"role": "system", "content": "You are Codex."},
        {"role": "user", "content": "Say hello"},
    ]
    assert sent["tools"][0]["function"]["strict"] is False and sent["parallel_tool_calls"] is True
    for hint in ("prompt_cache_key", "client_metadata", "include", "reasoning", "store", "reasoning_effort"):
        assert hint not in sent


def test_reasoning_effort_and_verbosity_are_mapped(gateway, upstream) -> None:
    upstream.script("up-large", ok("Paris."))
    response = gateway.client().responses.create(
        model="large", input=QUESTION, reasoning={"effort": "low"}, text={"verbosity": "low"}
    )
    assert response.reasoning.effort == "low"
    sent = upstream.calls("up-large")[0].body
    assert sent["reasoning_effort"] == "low" and sent["verbosity"] == "low"
