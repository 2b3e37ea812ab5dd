"""The gateway's traces received by a real backend: Arize Phoenix (tests/support/phoenix.py), one
server for the module, fed by the gateway's own OTLP/HTTP exporter behind its batch processor.

One streamed request escalates (the cheap stage scored low, the strong one relayed live) and
arrives as the expected tree: the SERVER span over one CLIENT span per attempt, with their
attributes; an incoming ``traceparent`` is honoured. The attribute details (retries, failures,
scorer calls, content capture) are checked in-process (tests/gateway/test_tracing.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.gateway_testkit import RunningGateway, until
from tests.support.phoenix import Phoenix
from tests.support.scripted_upstream import ScriptedUpstream, ok

TRACE_ID = "5bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "10f067aa0ba902b7"
# The conventions' content attributes, and what Phoenix would have made of them.
CONTENT_KEYS = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "llm.input_messages",
    "llm.output_messages",
)


@pytest.fixture
def traced_gateway(
    phoenix: Phoenix,
    start_served_gateway: Callable[..., RunningGateway],
    make_settings: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> RunningGateway:
    """The gateway under uvicorn, tracing to Phoenix (the batch exported every 100 ms)."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    tracing = {"enabled": True, "endpoint": phoenix.traces_endpoint, "service_name": "cascade-test"}
    return start_served_gateway(make_settings(tracing=tracing))


def _stream(gateway: RunningGateway, headers: dict[str, str] | None = None) -> httpx.Response:
    body = {
        "model": "cascade",
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 16,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=headers or {}, timeout=20)
    assert response.status_code == 200 and "data: [DONE]" in response.text
    return response


def _trace_of(phoenix: Phoenix, request_id: str, spans: int) -> list[dict[str, Any]]:
    """The stored spans of the request's trace, once all ``spans`` of it arrived."""
    found: list[dict[str, Any]] = []

    def arrived() -> bool:
        nonlocal found
        server = [s for s in phoenix.spans() if s["attributes"].get("cascade.request_id") == request_id]
        found = phoenix.spans(server[0]["context"]["trace_id"]) if server else []
        return len(found) == spans

    assert until(arrived, timeout_s=30), found
    return found


def test_an_escalated_streamed_request_arrives_as_a_server_span_over_its_attempts(
    phoenix: Phoenix, traced_gateway: RunningGateway, upstream: ScriptedUpstream
) -> None:
    upstream.script("up-small", ok(confidence=0.3))
    upstream.script("up-large", ok(confidence=0.99))
    response = _stream(traced_gateway)
    spans = _trace_of(phoenix, response.headers["x-request-id"], 3)
    if path := os.environ.get("CASCADE_TRACE_DUMP"):  # the docs' listing (docs/operations.md#tracing)
        Path(path).write_text(json.dumps(spans, indent=1, sort_keys=True))

    (server,) = [s for s in spans if s["parent_id"] is None]
    cheap, strong = sorted((s for s in spans if s["parent_id"]), key=lambda s: s["start_time"])
    sid = server["context"]["span_id"]
    assert cheap["parent_id"] == sid and strong["parent_id"] == sid
    assert server["name"] == "POST /v1/chat/completions"
    attrs = server["attributes"]
    assert attrs["cascade.outcome"] == "escalated" and attrs["cascade.reason"] == "low_score"
    assert attrs["cascade.tier"] == "balanced" and attrs["cascade.answered_by"] == "large"
    assert attrs["cascade.cost_usd"] > 0 and attrs["http.response.status_code"] == 200
    assert attrs["cascade.score"] < attrs["cascade.threshold"] == 0.5
    assert not [key for key in attrs if key.startswith(("gen_ai.", "llm."))]  # no model call
    assert [e["name"] for e in server["events"]] == ["cascade.stage"]

    assert (cheap["name"], strong["name"]) == ("chat up-small", "chat up-large")
    for span, model in ((cheap, "up-small"), (strong, "up-large")):
        genai = span["attributes"]
        assert span["span_kind"] == "LLM"  # Phoenix read it as a model call
        assert genai["gen_ai.operation.name"] == "chat" and genai["gen_ai.provider.name"] == "openai"
        assert genai["gen_ai.request.model"] == genai["gen_ai.response.model"] == model
        assert genai["gen_ai.request.max_tokens"] == 16 and genai["gen_ai.response.id"]
        assert genai["gen_ai.response.finish_reasons"] == ["stop"]
        assert genai["gen_ai.usage.input_tokens"] > 0 and genai["gen_ai.usage.output_tokens"] > 0
        assert genai["server.address"] == "127.0.0.1" and genai["server.port"] > 0
        assert not [key for key in genai if key in CONTENT_KEYS]  # content only when opted in
    assert strong["attributes"]["cascade.time_to_first_chunk_s"] >= 0
    assert [e["name"] for e in strong["events"]] == ["cascade.first_chunk"]


def test_an_incoming_traceparent_is_the_parent_of_the_server_span(
    phoenix: Phoenix, traced_gateway: RunningGateway, upstream: ScriptedUpstream
) -> None:
    upstream.script("up-small", ok(confidence=0.99))
    response = _stream(traced_gateway, headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
    spans = _trace_of(phoenix, response.headers["x-request-id"], 2)
    server = next(s for s in spans if s["attributes"].get("cascade.request_id"))
    assert server["context"]["trace_id"] == TRACE_ID and server["parent_id"] == PARENT_ID
    (call,) = [s for s in spans if s is not server]
    assert call["parent_id"] == server["context"]["span_id"]
