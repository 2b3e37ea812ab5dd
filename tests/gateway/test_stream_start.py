"""Early stream start: a streamed request whose decision is slow gets its 200 and keep-alives first.

The scripted upstream's scored stage answers late (``delay_s``); the gateway starts the stream after
``limits.stream_start_after_s`` and keeps it alive. The official openai and anthropic SDKs read such
streams (SSE comments, Anthropic ``ping`` events) unchanged; the decision rides in SSE comments; a
failure after the early start is the API's error event; the cost is the one without it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import pytest

from gateway.wire import logs
from tests.support.gateway_testkit import RunningGateway, until
from tests.support.scripted_upstream import ScriptedUpstream, error, ok

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
# Starts after 0.2 s; the scored stage answers after 1.2 s: several keep-alives come first.
EARLY = {
    "max_body_bytes": 65536,
    "request_timeout_s": 10,
    "stream_start_after_s": 0.2,
    "stream_keepalive_s": 0.1,
}
SLOW_S = 1.2  # within the test models' 2 s timeout


@pytest.fixture
def early_gateway(start_gateway: Callable[..., Any], make_settings: Callable[..., Any]) -> Any:
    """The test gateway (in-process) with a stream start after 0.2 s and a keep-alive every 0.1 s."""
    return start_gateway(make_settings(limits=EARLY))


def raw_stream(gateway: Any, path: str, body: dict[str, Any]) -> tuple[httpx.Response, bytes]:
    """The response (headers as received) and its whole body."""
    with gateway.http.stream("POST", path, json=body) as response:
        return response, response.read()


def test_a_late_chat_stream_starts_with_keepalives_and_the_decision_as_comments(
    early_gateway: Any, upstream: ScriptedUpstream
) -> None:
    upstream.script("up-small", ok("Paris is lovely.", confidence=0.99, delay_s=SLOW_S))
    response, body = raw_stream(
        early_gateway, "/v1/chat/completions", {"model": "cascade", "messages": MESSAGES, "stream": True}
    )
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-request-id"]
    assert "x-cascade-model" not in response.headers  # not decided when the headers went out
    before_data = body.split(b"data:", 1)[0]
    assert before_data.startswith(b": keep-alive\n\n: keep-alive\n\n")
    assert b": x-cascade-model: small\n" in before_data
    assert b": x-cascade-escalated: false\n" in before_data
    assert body.endswith(b"data: [DONE]\n\n")


def test_the_openai_sdk_reads_a_late_chat_stream_as_any_other(
    early_gateway: Any, upstream: ScriptedUpstream
) -> None:
    upstream.script("up-small", ok(confidence=0.3, delay_s=SLOW_S))
    upstream.script("up-large", ok("Paris , for sure .", confidence=0.99, usage=(20, 6)))
    chunks = list(
        early_gateway.client().chat.completions.create(model="cascade", messages=MESSAGES, stream=True)
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Paris , for sure ."
    cascade = chunks[-1].model_extra["cascade"]
    assert cascade["models_called"] == ["small", "large"] and cascade["escalated"] is True
    assert cascade["cost_usd"] == pytest.approx(2e-6 + 0.001)  # the charge of the same stream started late


def test_the_openai_sdk_reads_a_late_responses_stream(early_gateway: Any, upstream: ScriptedUpstream) -> None:
    upstream.script("up-small", ok("Paris is lovely.", confidence=0.99, delay_s=SLOW_S))
    events = list(
        early_gateway.client().responses.create(model="cascade", input="Capital of France?", stream=True)
    )
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "Paris is lovely."


def test_the_anthropic_sdk_reads_a_late_messages_stream_after_pings(
    early_gateway: Any, upstream: ScriptedUpstream
) -> None:
    upstream.script("up-small", ok("Paris is lovely.", confidence=0.99, delay_s=SLOW_S))
    client = early_gateway.anthropic_client()
    with client.messages.stream(model="cascade", max_tokens=64, messages=MESSAGES) as stream:
        message = stream.get_final_message()
    assert message.content[0].type == "text" and message.content[0].text == "Paris is lovely."
    assert message.stop_reason == "end_turn"
    upstream.script("up-small", ok("Paris is lovely.", confidence=0.99, delay_s=SLOW_S))
    body = {"model": "cascade", "max_tokens": 64, "messages": MESSAGES, "stream": True}
    _, raw = raw_stream(early_gateway, "/v1/messages", body)
    assert raw.startswith(b'event: ping\ndata: {"type":"ping"}\n\n')
    assert raw.index(b": x-cascade-model: small\n") < raw.index(b"event: message_start")


def test_a_failure_after_an_early_start_is_the_apis_error_event(
    early_gateway: Any, upstream: ScriptedUpstream
) -> None:
    # Every stage refuses: nothing can answer. The last one says why, in words the event carries.
    too_long = {"message": "too long", "type": "invalid_request_error", "code": "context_length_exceeded"}
    said = {"model": "large", "status": 400, "type": "invalid_request_error", "code": too_long["code"]}
    upstream.script("up-small", error(400, delay_s=SLOW_S))
    upstream.script("up-large", error(400, body={"error": too_long}))
    with pytest.raises(openai.APIError) as raised:
        list(early_gateway.client().chat.completions.create(model="cascade", messages=MESSAGES, stream=True))
    assert not isinstance(raised.value, openai.APIStatusError)  # an SSE error event, not a status
    assert raised.value.code == "context_length_exceeded" and raised.value.type == "invalid_request_error"
    assert raised.value.body["upstream"] == {**said, "param": None}  # type: ignore[index]
    upstream.script("up-small", error(400, delay_s=SLOW_S))
    upstream.script("up-large", error(400, body={"error": too_long}))
    events = list(early_gateway.client().responses.create(model="cascade", input="Capital?", stream=True))
    failure = next(event for event in events if event.type == "error")
    assert failure.code == "context_length_exceeded" and events[-1].type == "response.failed"
    upstream.script("up-small", error(400, delay_s=SLOW_S))
    upstream.script("up-large", error(400, body={"error": too_long}))
    client = early_gateway.anthropic_client()
    # The SDK raises an error event as APIStatusError (of the stream's 200) with the error body.
    with (
        pytest.raises(anthropic.APIStatusError) as anthropic_raised,
        client.messages.stream(model="cascade", max_tokens=64, messages=MESSAGES) as stream,
    ):
        stream.get_final_message()
    assert anthropic_raised.value.body["type"] == "error"  # type: ignore[index]
    assert anthropic_raised.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert anthropic_raised.value.body["error"]["upstream"]["code"] == "context_length_exceeded"  # type: ignore[index]


def test_the_log_line_keeps_the_decision_and_the_status_of_a_late_stream(
    early_gateway: Any, upstream: ScriptedUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    upstream.script("up-small", error(400, delay_s=SLOW_S))
    upstream.script("up-large", error(400))
    upstream.script("up-small", ok("Paris is lovely.", confidence=0.99, delay_s=SLOW_S))
    body = {"model": "cascade", "messages": MESSAGES, "stream": True}

    def lines() -> dict[str, dict[str, Any]]:
        return {r.fields["request_id"]: r.fields for r in caplog.records if r.getMessage() == "request"}  # type: ignore[attr-defined]

    with caplog.at_level(logging.INFO, logger=logs.LOGGER_NAME):
        failed, _ = raw_stream(early_gateway, "/v1/chat/completions", body)
        served, _ = raw_stream(early_gateway, "/v1/chat/completions", body)
        ids = {failed.headers["x-request-id"], served.headers["x-request-id"]}
        assert until(lambda: ids <= set(lines()))  # written once the request finished
    assert failed.status_code == served.status_code == 200
    logged = lines()
    assert logged[failed.headers["x-request-id"]]["status"] == 400
    assert logged[served.headers["x-request-id"]]["answered_by"] == "small"
    assert logged[served.headers["x-request-id"]]["status"] == 200


def test_a_client_gone_during_the_keepalive_cancels_the_upstream_call(
    start_served_gateway: Callable[..., RunningGateway],
    make_settings: Callable[..., Any],
    upstream: ScriptedUpstream,
) -> None:
    early_gateway = start_served_gateway(make_settings(limits=EARLY))  # a real socket: the client goes away
    upstream.script("up-small", ok("Paris is lovely.", confidence=0.99, delay_s=1.8))
    body = {"model": "cascade", "messages": MESSAGES, "stream": True}
    with (
        httpx.Client(timeout=20) as client,
        client.stream("POST", early_gateway.url + "/v1/chat/completions", json=body) as response,
    ):
        assert next(response.iter_bytes()).startswith(b": keep-alive\n\n")
    assert upstream.wait_for(lambda: upstream.cancelled == ["up-small"])


def test_a_stream_that_starts_in_time_carries_its_decision_as_headers(
    early_gateway: Any, upstream: ScriptedUpstream
) -> None:
    upstream.script("up-small", ok("Paris is lovely.", confidence=0.99))
    response, body = raw_stream(
        early_gateway, "/v1/chat/completions", {"model": "cascade", "messages": MESSAGES, "stream": True}
    )
    assert response.headers["x-cascade-model"] == "small"
    assert body.startswith(b"data: ") and b"keep-alive" not in body
