"""Streamed responses: replayed accepted answers, live escalations, the final ``cascade`` object, errors."""

from __future__ import annotations

import openai
import orjson
import pytest

from tests.support.scripted_upstream import error, ok

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def _collect(stream) -> tuple[str, list]:
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks


def test_accepted_answer_is_replayed_as_chunks(gateway, upstream) -> None:
    upstream.script("up-small", ok("Paris is lovely.", confidence=0.99))
    with gateway.client().chat.completions.with_streaming_response.create(
        model="cascade", messages=MESSAGES, stream=True
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-cascade-escalated"] == "false"
        text, chunks = _collect(response.parse())
    assert text == "Paris is lovely."
    assert all(c.model == "small" for c in chunks)
    cascade = chunks[-1].model_extra["cascade"]
    assert cascade["models_called"] == ["small"]
    assert cascade["escalated"] is False
    assert cascade["score"] > 0.5
    assert cascade["cost_usd"] == pytest.approx(2e-6)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert "stream" not in upstream.calls("up-small")[0].body  # the scored stage is not streamed


def test_escalated_request_streams_the_expensive_model_live(gateway, upstream) -> None:
    upstream.script("up-small", ok(confidence=0.3))
    upstream.script("up-large", ok("Paris , for sure .", confidence=0.99, usage=(20, 6)))
    stream = gateway.client().chat.completions.create(model="cascade", messages=MESSAGES, stream=True)
    text, chunks = _collect(stream)
    assert text == "Paris , for sure ."
    assert all(c.model == "large" for c in chunks)
    cascade = chunks[-1].model_extra["cascade"]
    assert cascade["models_called"] == ["small", "large"]
    assert cascade["escalated"] is True and cascade["model"] == "large"
    assert cascade["cost_usd"] == pytest.approx(2e-6 + 0.001)
    large_request = upstream.calls("up-large")[0].body
    assert large_request["stream"] is True
    assert large_request["stream_options"] == {"include_usage": True}
    assert all(c.choices for c in chunks)  # the usage chunk the client did not ask for is dropped
    assert all(c.choices[0].logprobs is None for c in chunks)


def test_usage_chunk_kept_when_client_asks(gateway, upstream) -> None:
    upstream.script("up-small", ok(confidence=0.3))
    stream = gateway.client().chat.completions.create(
        model="cascade", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    _, chunks = _collect(stream)
    assert chunks[-1].usage is not None and chunks[-1].choices == []
    assert "cascade" in chunks[-1].model_extra


def test_replayed_stream_keeps_usage_and_logprobs_when_asked(gateway, upstream) -> None:
    upstream.script("up-small", ok("Paris .", confidence=0.99))
    stream = gateway.client().chat.completions.create(
        model="cascade",
        messages=MESSAGES,
        stream=True,
        logprobs=True,
        top_logprobs=3,
        stream_options={"include_usage": True},
    )
    _, chunks = _collect(stream)
    with_logprobs = [c for c in chunks if c.choices and c.choices[0].logprobs]
    assert with_logprobs and all(
        len(e.top_logprobs) == 3 for e in with_logprobs[0].choices[0].logprobs.content
    )
    assert chunks[-1].usage.completion_tokens == 5


async def test_async_streaming(gateway, upstream) -> None:
    upstream.script("up-small", ok("One two three", confidence=0.99))
    async with gateway.async_client() as client:
        stream = await client.chat.completions.create(model="cascade", messages=MESSAGES, stream=True)
        parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    assert "".join(parts) == "One two three"


def test_passthrough_streams_live_with_model_renamed(gateway, upstream) -> None:
    stream = gateway.client().chat.completions.create(model="medium", messages=MESSAGES, stream=True)
    text, chunks = _collect(stream)
    assert text == "answer from up-medium"
    assert {c.model for c in chunks} == {"medium"}
    assert chunks[-1].model_extra["cascade"]["tier"] == "passthrough"


def test_streamed_legacy_completions(gateway, upstream) -> None:
    upstream.script("up-small", ok("Paris", confidence=0.99))
    stream = gateway.client().completions.create(model="cascade", prompt="Capital:", stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "Paris"
    assert chunks[-1].model_extra["cascade"]["models_called"] == ["small"]


def test_expensive_stream_refused_before_start_falls_back_to_degraded_cheap_answer(gateway, upstream) -> None:
    upstream.script("up-small", ok("cheap guess", confidence=0.3))
    upstream.script("up-large", error(500), error(500))
    with gateway.client().chat.completions.with_streaming_response.create(
        model="cascade", messages=MESSAGES, stream=True
    ) as response:
        assert response.headers["x-cascade-degraded"] == "true"
        text, chunks = _collect(response.parse())
    assert text == "cheap guess"
    assert chunks[-1].model_extra["cascade"]["degraded"] is True


def test_stream_cut_mid_way_ends_with_sse_error_event(gateway, upstream) -> None:
    upstream.script("up-small", ok(confidence=0.3))
    upstream.script("up-large", ok("a b c d e f", break_stream_after=3))
    with gateway.http.stream(
        "POST",
        "/v1/chat/completions",
        timeout=10,
        json={"model": "cascade", "messages": MESSAGES, "stream": True},
    ) as response:
        assert response.status_code == 200
        body = response.read().decode()
    assert "event: error" in body
    error_data = body.split("event: error\ndata: ")[1].split("\n")[0]
    assert orjson.loads(error_data)["error"]["type"] == "upstream_error"
    assert "[DONE]" not in body
    with pytest.raises(openai.APIError):
        upstream.script("up-small", ok(confidence=0.3))
        upstream.script("up-large", ok("a b c d e f", break_stream_after=3))
        list(gateway.client().chat.completions.create(model="cascade", messages=MESSAGES, stream=True))


def test_stream_fails_with_http_error_when_nothing_can_answer(
    start_gateway, make_settings, write_policy, upstream
) -> None:
    gateway = start_gateway(make_settings(write_policy(allow_degraded=False)))
    upstream.script("up-small", ok(confidence=0.3))
    upstream.script("up-large", error(502), error(502))
    with pytest.raises(openai.APIStatusError) as info:
        list(gateway.client().chat.completions.create(model="cascade", messages=MESSAGES, stream=True))
    assert info.value.status_code == 502
