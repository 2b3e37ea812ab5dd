"""A client's request and an upstream's answer are data, never code, through the real app with the
official openai and anthropic SDKs in front of the scripted upstream: schema refs never leave the
request (400), patterns run in linear time, an answer the gateway cannot read is a 502 in the API's
own shape with its call charged, malformed Responses/Messages bodies are 400s, upstream errors are
redacted however they split a key, and an address that keeps sending wrong keys is held off (the
forwarded address counting only from a trusted proxy, a valid key never locked out)."""

from __future__ import annotations

import time
from typing import Any

import anthropic
import openai
import orjson
import pytest

from tests.support.gateway_testkit import RunningGateway, model_configs
from tests.support.listener import Listener
from tests.support.scripted_upstream import Reply, error, ok

QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture
def listener():
    running = Listener()
    yield running
    running.close()


def _tool(parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "get_weather", "parameters": parameters}}


def _cost(gateway: RunningGateway, model: str) -> float:
    return gateway.sample("cascade_cost_usd_total", model=model)


# --- schemas --------------------------------------------------------------------------------------


def test_a_schema_ref_to_a_url_is_a_400_on_every_api_and_nothing_is_fetched(
    gateway, upstream, listener
) -> None:
    remote = {"type": "object", "properties": {"city": {"$ref": f"http://127.0.0.1:{listener.port}/s.json"}}}
    with pytest.raises(openai.BadRequestError) as chat:
        gateway.client().chat.completions.create(model="cascade", messages=QUESTION, tools=[_tool(remote)])
    assert chat.value.body["code"] == "invalid_schema"  # type: ignore[index]
    assert "tools[0].function.parameters" in chat.value.message
    with pytest.raises(openai.BadRequestError) as responses:
        gateway.client().responses.create(
            model="cascade",
            input="Paris?",
            text={"format": {"type": "json_schema", "name": "city", "schema": remote}},
        )
    assert responses.value.body["code"] == "invalid_schema"  # type: ignore[index]
    sdk = gateway.anthropic_client()
    with pytest.raises(anthropic.BadRequestError) as messages:
        sdk.messages.create(
            model="cascade",
            max_tokens=50,
            messages=QUESTION,  # type: ignore[arg-type]
            tools=[{"name": "get_weather", "input_schema": {**remote, "$id": "file:///etc/x"}}],
        )
    assert messages.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert "outside the schema" in messages.value.message
    assert listener.connections() == 0
    assert upstream.requests == []


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "file:///etc/passwd"},
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        {"type": "string", "pattern": "(?=a)a"},
        # Refs where no draft the gateway runs follows them, and draft 3 itself: a 400, never a
        # schema accepted on arrival that the answer check cannot run.
        {"$schema": "http://json-schema.org/draft-03/schema#", "extends": {"$ref": "http://x/s.json"}},
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": [{"$ref": "http://x/s.json"}]},
        {"type": "string", "contentSchema": {"$ref": "http://x/s.json"}},
    ],
)
def test_a_file_ref_a_ref_loop_or_a_backtracking_only_pattern_is_a_400(gateway, upstream, schema) -> None:
    response_format: Any = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    with pytest.raises(openai.BadRequestError) as refused:
        gateway.client().chat.completions.create(
            model="cascade", messages=QUESTION, response_format=response_format
        )
    assert refused.value.body["code"] == "invalid_schema"  # type: ignore[index]
    assert upstream.requests == []


def test_a_pattern_an_answer_can_steer_does_not_stall_the_gateway(
    start_gateway, make_settings, upstream
) -> None:
    gateway = start_gateway(make_settings())
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a+)+$"}}}
    response_format: Any = {"type": "json_schema", "json_schema": {"name": "code", "schema": schema}}
    upstream.script("up-large", ok('{"code": "' + "a" * 60 + '!"}'))
    started = time.perf_counter()
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="cascade/direct", messages=QUESTION, response_format=response_format
    )
    # Python's re needs about 2^60 steps for this; the linear engine answers at once.
    assert time.perf_counter() - started < 5.0
    assert raw.parse().choices[0].message.content.endswith('!"}')
    assert (
        gateway.sample("cascade_invalid_answers_total", model="large", check="invalid_structured_output") == 1
    )


# --- answers the gateway cannot read ---------------------------------------------------------------


def _answer(model: str = "up-large") -> dict[str, Any]:
    return {
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _deep_answer(depth: int, model: str = "up-large", *, in_message: bool = False) -> Reply:
    """A complete chat answer with one field (``extra``, or a tool call's object ``arguments``)
    nested ``depth`` levels (orjson reads 1,024, writes 255), written by hand: no JSON writer
    writes it."""
    answer = _answer(model)
    if in_message:
        call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "DEEP"}}
        answer["choices"][0]["message"].update(content=None, tool_calls=[call])
    else:
        answer["extra"] = "DEEP"
    nested = b"[" * depth + b'"deep"' + b"]" * depth
    return Reply(raw=orjson.dumps(answer).replace(b'"DEEP"', nested))


def test_an_answer_nested_past_the_writer_is_a_502_on_chat_with_its_call_charged(gateway, upstream) -> None:
    upstream.script("up-large", _deep_answer(400))
    with pytest.raises(openai.APIStatusError) as failed:
        gateway.client().chat.completions.create(model="cascade/direct", messages=QUESTION)
    assert failed.value.status_code == 502
    assert failed.value.body["code"] == "upstream_unreadable"  # type: ignore[index]
    assert _cost(gateway, "large") == pytest.approx(0.001)  # the call was billed: charged


def test_an_unreadable_answer_is_a_502_in_the_responses_shape(gateway, upstream) -> None:
    upstream.script("up-large", _deep_answer(400, in_message=True))
    with pytest.raises(openai.APIStatusError) as failed:
        gateway.client().responses.create(model="cascade/direct", input="Paris?")
    assert failed.value.status_code == 502
    assert failed.value.body["code"] == "upstream_unreadable"  # type: ignore[index]
    assert _cost(gateway, "large") == pytest.approx(0.001)


def test_a_finish_reason_that_is_a_list_is_a_502_in_the_messages_shape(gateway, upstream) -> None:
    body = _answer()
    body["choices"][0]["finish_reason"] = ["stop"]
    upstream.script("up-large", Reply(body=body))
    sdk = gateway.anthropic_client()
    with pytest.raises(anthropic.APIStatusError) as failed:
        sdk.messages.create(model="cascade/direct", max_tokens=50, messages=QUESTION)  # type: ignore[arg-type]
    assert failed.value.status_code == 502
    assert failed.value.body["type"] == "error"  # type: ignore[index]
    assert _cost(gateway, "large") == pytest.approx(0.001)


def test_an_unreadable_cheap_answer_escalates_and_is_charged(gateway, upstream) -> None:
    # The cheap stage's call has object arguments nested past what can be written: checking the
    # call cannot read it, so the stage failed (escalated, charged); the final stage answers.
    upstream.script("up-small", _deep_answer(400, "up-small", in_message=True))
    upstream.script("up-large", ok("Sunny."))
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="cascade", messages=QUESTION, tools=[_tool({"type": "object"})]
    )
    assert raw.parse().choices[0].message.content == "Sunny."
    assert raw.headers["x-cascade-escalation-reason"] == "upstream_error"
    assert raw.headers["x-cascade-models-called"] == "small,large"
    assert _cost(gateway, "small") > 0


def _content_model_settings(make_settings, upstream) -> Any:
    models = model_configs(upstream.base_url)
    models["large"]["tool_calls"] = "content"
    return make_settings(models=models)


@pytest.mark.parametrize("depth", [300, 1_100])
def test_a_call_written_as_content_nested_past_the_parsers_is_no_500(
    start_gateway, make_settings, upstream, depth
) -> None:
    gateway = start_gateway(_content_model_settings(make_settings, upstream))
    arguments = "[" * depth + "]" * depth
    upstream.script("up-large", ok('{"name": "get_weather", "arguments": {"x": ' + arguments + "}}"))
    completion = gateway.client().chat.completions.create(
        model="cascade/direct", messages=QUESTION, tools=[_tool({"type": "object"})]
    )
    # Too deep to be read as a call: the content is returned as the text it is.
    assert completion.choices[0].message.content.endswith("]}}")  # type: ignore[union-attr]
    assert not completion.choices[0].message.tool_calls
    assert _cost(gateway, "large") == pytest.approx(0.001)


def test_thousands_of_unclosed_call_tags_are_read_in_linear_time(
    start_gateway, make_settings, upstream
) -> None:
    gateway = start_gateway(_content_model_settings(make_settings, upstream))
    upstream.script("up-large", ok("<tool_call>" * 20_000))
    started = time.perf_counter()
    completion = gateway.client().chat.completions.create(
        model="cascade/direct", messages=QUESTION, tools=[_tool({"type": "object"})]
    )
    assert time.perf_counter() - started < 5.0  # 24 s and more with the quadratic regex
    assert completion.choices[0].message.content == "<tool_call>" * 20_000


def _chunks(model: str, deltas: list[dict[str, Any]], finish: Any = "stop") -> list[dict[str, Any]]:
    base = {"id": "chunk", "object": "chat.completion.chunk", "created": 1, "model": model}
    events = [{**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return events


def test_a_streamed_tool_call_chunk_over_512_kib_is_a_clean_stream_error(gateway, upstream) -> None:
    fragment = {
        "index": 0,
        "id": "c1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": "x" * 600_000},
    }
    events = _chunks(
        "up-large", [{"role": "assistant", "content": ""}, {"tool_calls": [fragment]}], "tool_calls"
    )
    upstream.script("up-large", Reply(stream_events=events))
    stream = gateway.client().chat.completions.create(
        model="cascade/direct", messages=QUESTION, tools=[_tool({"type": "object"})], stream=True
    )
    with pytest.raises(openai.APIError) as failed:  # the stream had started: its SSE error event
        list(stream)
    assert "failed" in failed.value.message and "internal" not in failed.value.message
    assert _cost(gateway, "large") > 0  # the call was accepted: charged by what it streamed


def test_a_streamed_finish_reason_that_is_a_list_ends_a_messages_stream_with_an_error_event(
    gateway, upstream
) -> None:
    events = _chunks("up-large", [{"role": "assistant", "content": "Sunny"}], finish=["stop"])
    upstream.script("up-large", Reply(stream_events=events))
    sdk = gateway.anthropic_client()
    try:
        with sdk.messages.stream(model="cascade/direct", max_tokens=50, messages=QUESTION) as stream:  # type: ignore[arg-type]
            list(stream)
        raise AssertionError("the stream ended without an error")
    except anthropic.APIStatusError as failed:  # an error response, or the in-stream error event
        assert failed.status_code in (200, 502)
        assert failed.body["type"] == "error"  # type: ignore[index]
        assert "cannot read" in failed.message
    assert _cost(gateway, "large") == pytest.approx(0.001)


# --- malformed client bodies -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (
            "/v1/responses",
            {"model": "cascade", "input": [{"type": "message", "role": ["user"], "content": "hi"}]},
        ),
        (
            "/v1/responses",
            {"model": "cascade", "input": [{"type": "message", "role": {"a": 1}, "content": "hi"}]},
        ),
        ("/v1/responses", {"model": "cascade", "input": "hi", "include": [["x"]]}),
        ("/v1/responses", {"model": "cascade", "input": "hi", "include": [{"a": 1}]}),
        ("/v1/responses", {"model": "cascade", "input": "hi", "reasoning": {"effort": ["low"]}}),
        ("/v1/responses", {"model": "cascade", "input": "hi", "text": {"verbosity": {"a": 1}}}),
        ("/v1/responses", {"model": "cascade", "input": "hi", "text": {"verbosity": ["low"]}}),
    ],
)
def test_a_malformed_responses_body_is_a_400_never_a_500(gateway, upstream, path, body) -> None:
    response = gateway.http.post(path, json=body, timeout=10)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert upstream.requests == []


# --- redaction -----------------------------------------------------------------------------------------


SECRET = "sk-upstream-0123456789abcdef"


@pytest.mark.parametrize(
    "split",
    [
        SECRET[:12] + "\n" + SECRET[12:],
        SECRET[:12] + "\r\n  " + SECRET[12:],
        SECRET[:5] + "\\n" + SECRET[5:],
        SECRET[:8] + f"\\u{ord(SECRET[8]):04x}" + SECRET[9:],
        SECRET[:10] + "\u200b" + SECRET[10:],
    ],
)
def test_an_upstream_error_that_splits_the_key_is_redacted(
    start_gateway, make_settings, upstream, monkeypatch, split
) -> None:
    monkeypatch.setenv("LARGE_UPSTREAM_KEY", SECRET)
    models = model_configs(upstream.base_url)
    models["large"]["api_key_env"] = "LARGE_UPSTREAM_KEY"
    gateway = start_gateway(make_settings(models=models))
    upstream.script("up-large", error(400, body={"error": {"message": f"invalid key {split} for this org"}}))
    with pytest.raises(openai.BadRequestError) as refused:
        gateway.client().chat.completions.create(model="cascade/direct", messages=QUESTION)
    message = refused.value.message
    assert "for this org" in message and "***" in message
    for piece in (SECRET[:12], SECRET[12:], SECRET[-8:]):
        assert piece not in message


# --- repeated wrong keys ----------------------------------------------------------------------------------


def test_an_address_that_keeps_sending_wrong_keys_is_held_off_and_a_valid_key_still_passes(
    start_gateway, make_settings, upstream, monkeypatch
) -> None:
    monkeypatch.setenv("TEST_CLIENT_KEYS", "sk-client-good")
    gateway = start_gateway(
        make_settings(auth={"api_keys_env": "TEST_CLIENT_KEYS", "admin_key_env": None, "failure_limit": 5})
    )
    for _ in range(5):
        with pytest.raises(openai.AuthenticationError):
            gateway.client(api_key="sk-guess").chat.completions.create(model="cascade", messages=QUESTION)
    with pytest.raises(openai.RateLimitError) as held:
        gateway.client(api_key="sk-guess-again").chat.completions.create(model="cascade", messages=QUESTION)
    assert held.value.body["code"] == "too_many_auth_failures"  # type: ignore[index]
    assert int(held.value.response.headers["retry-after"]) >= 1
    with pytest.raises(openai.RateLimitError):
        gateway.client(api_key="none").models.list()
    # A valid key from the same address is served all along.
    answer = gateway.client(api_key="sk-client-good").chat.completions.create(
        model="cascade", messages=QUESTION
    )
    assert answer.choices[0].message.content
    assert gateway.sample("cascade_auth_failures_total", reason="unknown") == 5
    assert gateway.sample("cascade_auth_failures_total", reason="throttled") == 2


@pytest.mark.parametrize("trusted", [[], ["127.0.0.1"]], ids=["no-proxy", "trusted-proxy"])
def test_a_forwarded_address_counts_only_from_a_trusted_proxy_and_never_locks_a_valid_key_out(
    start_gateway, make_settings, upstream, monkeypatch, trusted: list[str]
) -> None:
    monkeypatch.setenv("TEST_CLIENT_KEYS", "sk-client-good")
    auth = {"api_keys_env": "TEST_CLIENT_KEYS", "admin_key_env": None, "failure_limit": 5}
    gateway = start_gateway(make_settings(auth=auth, trusted_proxies=trusted))

    def ask(key: str, forwarded_for: str) -> Any:
        client = gateway.client(api_key=key, default_headers={"x-forwarded-for": forwarded_for})
        return client.chat.completions.create(model="cascade", messages=QUESTION)

    for i in range(5):  # five wrong keys claiming the address of another client
        with pytest.raises(openai.AuthenticationError):
            ask(f"sk-guess-{i}", "198.51.100.7")
    # A wrong key claiming a fresh address: held off with the peer when no proxy is trusted (the
    # claim is ignored), counted apart behind a trusted proxy.
    fresh = openai.RateLimitError if not trusted else openai.AuthenticationError
    with pytest.raises(fresh):
        ask("sk-guess-5", "198.51.100.8")
    assert ask("sk-client-good", "198.51.100.7").choices[0].message.content  # never locked out
