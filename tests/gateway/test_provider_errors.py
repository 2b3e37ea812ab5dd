"""An upstream's refusal of a request reaches the client in its own words, and a content-policy
refusal is the operator's call (docs/contracts.md#upstream-errors).

The scripted upstream answers 400 ``context_length_exceeded`` or ``content_policy_violation``; the
official openai and anthropic SDKs read the gateway's answer on chat, Responses and Messages,
streamed or not. The bodies of the other servers (llama.cpp, vLLM, Azure, Anthropic-style) are read
by ``read_provider_error`` directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from gateway.upstream.provider_errors import ProviderError, is_content_refusal, read_provider_error
from redaction import Redactor
from tests.support.in_process_gateway import InProcessGateway
from tests.support.scripted_upstream import ScriptedUpstream, error, ok

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
CONTEXT = {
    "error": {
        "message": "This model's maximum context length is 8192 tokens.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
REFUSAL = {
    "error": {
        "message": "Your request was rejected as a result of our safety system.",
        "type": "invalid_request_error",
        "param": None,
        "code": "content_policy_violation",
    }
}
BODIES = {"context_length_exceeded": CONTEXT, "content_policy_violation": REFUSAL}
ESCALATE = {"content_policy": "escalate"}


def _client_error(gateway: InProcessGateway, api: str, stream: bool) -> tuple[int, dict[str, Any], Any]:
    """What the SDK of ``api`` raised for a cascade request: (status, the error object, headers)."""
    openai_client, anthropic_client = gateway.client(), gateway.anthropic_client()
    with pytest.raises((openai.APIStatusError, anthropic.APIStatusError)) as raised:
        if api == "chat":
            answer: Any = openai_client.chat.completions.create(
                model="cascade", messages=MESSAGES, stream=stream
            )
        elif api == "responses":
            answer = openai_client.responses.create(
                model="cascade", input="Capital of France?", stream=stream
            )
        elif stream:
            with anthropic_client.messages.stream(model="cascade", max_tokens=64, messages=MESSAGES) as s:
                answer = s.get_final_message()
        else:
            answer = anthropic_client.messages.create(model="cascade", max_tokens=64, messages=MESSAGES)
        if stream and api != "messages":
            list(answer)
    body = raised.value.body
    assert isinstance(body, dict)
    if api == "messages":
        assert body["type"] == "error"
    return raised.value.status_code, body.get("error", body), raised.value.response.headers


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
@pytest.mark.parametrize("code", sorted(BODIES))
def test_the_client_sees_the_providers_code_in_its_apis_error_shape(
    gateway: InProcessGateway, upstream: ScriptedUpstream, code: str, api: str, stream: bool
) -> None:
    upstream.script("up-small", error(400, body=BODIES[code]))
    upstream.script("up-large", error(400, body=BODIES[code]))
    status, seen, headers = _client_error(gateway, api, stream)

    refused_by = "small" if code == "content_policy_violation" else "large"
    assert status == 400 and headers["x-cascade-error-source"] == "upstream"
    assert seen["upstream"] == {
        "model": refused_by,
        "status": 400,
        "type": "invalid_request_error",
        "code": code,
        "param": BODIES[code]["error"]["param"],
    }
    assert seen["type"] == "invalid_request_error"  # OpenAI's, and Anthropic's type of a 400
    if api != "messages":
        assert seen["code"] == code and seen["param"] == BODIES[code]["error"]["param"]
    assert f"upstream model '{refused_by}' rejected the request: " in seen["message"]
    # A too-long context escalates (a larger model may take it); a safety refusal is returned.
    called = [request.model for request in upstream.requests]
    assert called == (["up-small"] if refused_by == "small" else ["up-small", "up-large"])
    assert gateway.sample("cascade_cost_usd_total") == 0.0  # an error status bills nothing


def test_the_gateways_own_errors_carry_no_upstream_object(gateway: InProcessGateway) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        gateway.client().chat.completions.create(model="cascade/nope", messages=MESSAGES)
    assert raised.value.code == "unknown_tier"
    assert isinstance(raised.value.body, dict) and "upstream" not in raised.value.body
    assert "x-cascade-error-source" not in raised.value.response.headers


def test_a_refusal_is_returned_by_default_and_counted(
    gateway: InProcessGateway, upstream: ScriptedUpstream
) -> None:
    upstream.script("up-small", error(400, body=REFUSAL))
    with pytest.raises(openai.BadRequestError) as raised:
        gateway.client().chat.completions.create(model="cascade", messages=MESSAGES)
    assert raised.value.code == "content_policy_violation"
    assert upstream.calls("up-large") == []
    assert gateway.sample("cascade_content_refusals_total", model="small", action="returned") == 1
    assert gateway.sample("cascade_escalations_total") == 0


def test_escalate_sends_a_refusal_on_to_the_next_stage_with_its_reason(
    start_gateway: Callable[..., InProcessGateway],
    make_settings: Callable[..., Any],
    upstream: ScriptedUpstream,
) -> None:
    gateway = start_gateway(make_settings(upstream_errors=ESCALATE))
    upstream.script("up-small", error(400, body=REFUSAL))
    upstream.script("up-large", ok("Paris."))
    raw = gateway.client().chat.completions.with_raw_response.create(model="cascade", messages=MESSAGES)
    assert raw.parse().choices[0].message.content == "Paris."
    assert raw.headers["x-cascade-model"] == "large"
    assert raw.headers["x-cascade-escalation-reason"] == "content_policy"
    assert gateway.sample("cascade_escalation_reasons_total", model="small", reason="content_policy") == 1
    assert gateway.sample("cascade_content_refusals_total", model="small", action="escalated") == 1
    # Only the answer is charged: the refused call's error status bills nothing.
    assert gateway.sample("cascade_cost_usd_total", model="small") == 0.0
    assert gateway.sample("cascade_cost_usd_total", model="large") == pytest.approx(0.001)


@pytest.mark.parametrize(("switch", "action"), [({}, "returned"), (ESCALATE, "degraded")])
def test_a_final_stage_refusal_is_no_place_for_the_degraded_answer_unless_escalated(
    start_gateway: Callable[..., InProcessGateway],
    make_settings: Callable[..., Any],
    upstream: ScriptedUpstream,
    switch: dict[str, str],
    action: str,
) -> None:
    gateway = start_gateway(make_settings(upstream_errors=switch))
    upstream.script("up-small", ok("Lyon?", confidence=0.3))  # escalated, kept as the fallback
    upstream.script("up-large", error(400, body=REFUSAL))
    client = gateway.client()
    if action == "returned":
        with pytest.raises(openai.BadRequestError) as raised:
            client.chat.completions.create(model="cascade", messages=MESSAGES)
        assert raised.value.code == "content_policy_violation"
    else:
        raw = client.chat.completions.with_raw_response.create(model="cascade", messages=MESSAGES)
        assert raw.headers["x-cascade-degraded"] == "true" and raw.headers["x-cascade-model"] == "small"
    assert gateway.sample("cascade_content_refusals_total", model="large", action=action) == 1


REDACT = Redactor(["sk-upstream-secret-123456"])


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            b'{"error":{"code":400,"message":"the request exceeds the available context size",'
            b'"type":"exceed_context_size_error","n_prompt_tokens":1407,"n_ctx":256}}',
            ProviderError("the request exceeds the available context size", "exceed_context_size_error"),
            id="llama.cpp: an integer code is the status, the fault is its type",
        ),
        pytest.param(
            b'{"object":"error","message":"maximum context length is 4096 tokens",'
            b'"type":"BadRequestError","param":null,"code":400}',
            ProviderError("maximum context length is 4096 tokens", "BadRequestError"),
            id="vLLM before 0.6: the fields at the top level",
        ),
        pytest.param(
            b'{"error":{"message":"filtered","type":null,"param":"prompt","code":"content_filter","status":400,'
            b'"innererror":{"code":"ResponsibleAIPolicyViolation"}}}',
            ProviderError("filtered", None, "content_filter", "prompt"),
            id="Azure OpenAI's content filter",
        ),
        pytest.param(
            b'{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long"}}',
            ProviderError("prompt is too long", "invalid_request_error"),
            id="Anthropic-style",
        ),
        pytest.param(b'{"error":"model not loaded"}', ProviderError("model not loaded"), id="a bare message"),
        pytest.param(
            b'{"error":{"message":"key sk-upstream-secret-123456","code":"sk-upstream-secret-123456",'
            b'"type":"no spaces allowed in a type","param":"messages[0].content"}}',
            ProviderError("key ***", None, None, "messages[0].content"),
            id="a secret or free text in a code field is dropped",
        ),
        pytest.param(b"<html>bad gateway</html>", ProviderError(), id="not JSON"),
        pytest.param(b'["error"]', ProviderError(), id="not an object"),
    ],
)
def test_every_servers_error_body_is_read_for_its_machine_readable_words(
    body: bytes, expected: ProviderError
) -> None:
    assert read_provider_error(body, REDACT) == expected


@pytest.mark.parametrize(
    ("said", "refusal"),
    [
        (ProviderError(code="content_policy_violation"), True),
        (ProviderError(code="content_filter"), True),
        (ProviderError(code="invalid_prompt", type="invalid_request_error"), True),
        (ProviderError(type="content_policy_violation"), True),
        (ProviderError(code="context_length_exceeded", type="invalid_request_error"), False),
        (ProviderError(message="content_policy_violation"), False),  # words in a message are no code
        (None, False),
    ],
)
def test_a_content_refusal_is_recognised_by_the_providers_code_or_type(
    said: ProviderError | None, refusal: bool
) -> None:
    assert is_content_refusal(said) is refusal


FILTERED = {"message": "filtered", "type": None, "param": "prompt", "code": "content_filter", "status": 400}
OPENING = {
    "id": "c1",
    "object": "chat.completion.chunk",
    "model": "up-large",
    "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Par"}, "finish_reason": None}],
}


def test_an_error_event_opening_a_live_stream_is_the_providers_refusal(
    gateway: InProcessGateway, upstream: ScriptedUpstream
) -> None:
    upstream.script("up-large", ok(stream_events=[{"error": FILTERED}]))
    with pytest.raises(openai.BadRequestError) as raised:
        list(gateway.client().chat.completions.create(model="large", messages=MESSAGES, stream=True))
    assert raised.value.code == "content_filter" and raised.value.param == "prompt"
    assert raised.value.body["upstream"]["model"] == "large"  # type: ignore[index]


def test_an_error_event_inside_a_live_stream_ends_it_with_the_providers_code(
    gateway: InProcessGateway, upstream: ScriptedUpstream
) -> None:
    upstream.script("up-large", ok(stream_events=[OPENING, {"error": FILTERED}]))
    stream = gateway.client().chat.completions.create(model="large", messages=MESSAGES, stream=True)
    with pytest.raises(openai.APIError) as raised:
        for chunk in stream:
            assert chunk.choices[0].delta.content == "Par"  # what came before the error
    assert not isinstance(raised.value, openai.APIStatusError)  # an SSE error event of the 200
    assert raised.value.code == "content_filter" and raised.value.type == "invalid_request_error"
