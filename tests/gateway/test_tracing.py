"""OpenTelemetry traces of the gateway (gateway.telemetry.tracing), in-process: the SDK's
InMemorySpanExporter stands where the OTLP exporter would (tests/gateway/test_tracing_phoenix.py
checks the same trace in a real backend). Spans end after the response is sent: each test waits
for the request's SERVER span to be exported."""

from __future__ import annotations

import ast
import asyncio
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gateway.config.settings import TracingConfig
from gateway.routing.routed_tiers import RouterRuntime
from gateway.telemetry.metrics import GatewayMetrics
from gateway.telemetry.otel_spans import Tracing
from gateway.telemetry.tracing import build_tracing, tracing_enabled
from gateway.wire.requests import parse_request
from policies.route_features import MINILM
from redaction import Redactor
from tests.support.in_process_gateway import InProcessGateway
from tests.support.policy_files import write_policy
from tests.support.scripted_upstream import ScriptedUpstream, error, ok

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
REPO = Path(__file__).resolve().parents[2]


class Spans(InMemorySpanExporter):
    """The finished spans, with an event set when a request's SERVER span is exported."""

    def __init__(self) -> None:
        super().__init__()
        self.served = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = super().export(spans)
        if any(span.kind is SpanKind.SERVER for span in spans):
            self.served.set()
        return result

    def request(self) -> tuple[ReadableSpan, list[ReadableSpan]]:
        """The request's SERVER span and its CLIENT spans, in start order (waits for the former)."""
        assert self.served.wait(10), "no server span was exported"
        spans = self.get_finished_spans()
        (server,) = [s for s in spans if s.kind is SpanKind.SERVER]
        clients = sorted((s for s in spans if s.kind is SpanKind.CLIENT), key=lambda s: s.start_time or 0)
        return server, clients


@pytest.fixture
def traced(
    start_gateway: Callable[..., InProcessGateway], make_settings: Callable[..., Any]
) -> Callable[..., tuple[InProcessGateway, Spans]]:
    """``traced(capture_content=False, **settings_changes)``: an in-process gateway whose spans go to
    a ``Spans`` exporter, as each ends."""

    def start(
        capture_content: bool = False, batch: bool = False, **changes: Any
    ) -> tuple[InProcessGateway, Spans]:
        gateway = start_gateway(make_settings(**changes))
        spans = Spans()
        config = TracingConfig(enabled=True, capture_content=capture_content)
        redact = gateway.gateway.pool.clients["small"].redact
        gateway.gateway.tracing = Tracing.with_exporter(spans, config, redact, batch=batch)
        return gateway, spans

    return start


def _ask(gateway: InProcessGateway, headers: dict[str, str] | None = None, **body: Any) -> Any:
    payload = {"model": "cascade", "messages": QUESTION, "max_tokens": 16, **body}
    response = gateway.http.post("/v1/chat/completions", json=payload, headers=headers or {})
    assert response.status_code == 200, response.text
    return response


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_an_accepted_request_is_one_server_span_over_one_genai_client_span(
    traced: Callable[..., tuple[InProcessGateway, Spans]], upstream: ScriptedUpstream
) -> None:
    gateway, spans = traced()
    upstream.script("up-small", ok(confidence=0.99))
    response = _ask(gateway)
    server, (call,) = spans.request()

    assert server.name == "POST /v1/chat/completions"
    attrs = _attrs(server)
    assert attrs["cascade.request_id"] == response.headers["x-request-id"]
    assert attrs["cascade.tier"] == "balanced" and attrs["cascade.outcome"] == "accepted"
    assert attrs["cascade.policy_id"] == response.headers["x-cascade-policy"]
    assert attrs["cascade.cost_usd"] == pytest.approx(float(response.headers["x-cascade-cost-usd"]))
    assert attrs["http.response.status_code"] == 200 and attrs["http.request.method"] == "POST"
    assert not [name for name in attrs if name.startswith("gen_ai.")]
    (stage,) = [e for e in server.events if e.name == "cascade.stage"]
    assert stage.attributes is not None and stage.attributes["cascade.stage.model"] == "small"
    assert stage.attributes["cascade.threshold"] == 0.5 and stage.attributes["cascade.score"] > 0.5

    assert call.parent is not None and call.parent.span_id == server.context.span_id
    assert call.context.trace_id == server.context.trace_id
    answer = response.json()
    genai = _attrs(call)
    assert call.name == "chat up-small"
    assert genai["gen_ai.operation.name"] == "chat" and genai["gen_ai.provider.name"] == "openai"
    assert genai["gen_ai.request.model"] == "up-small" and genai["gen_ai.request.max_tokens"] == 16
    assert genai["gen_ai.response.model"] == "up-small"
    assert genai["gen_ai.response.id"] == answer["id"]
    assert genai["gen_ai.response.finish_reasons"] == ("stop",)
    assert genai["gen_ai.usage.input_tokens"] == answer["usage"]["prompt_tokens"]
    assert genai["gen_ai.usage.output_tokens"] == answer["usage"]["completion_tokens"]
    assert genai["server.address"] == upstream.base_url.split("//")[1].split(":")[0]
    assert isinstance(genai["server.port"], int)
    assert "error.type" not in genai
    # No content unless the operator opts in.
    assert "gen_ai.input.messages" not in genai and "gen_ai.output.messages" not in genai


def test_each_retry_and_failed_attempt_is_its_own_span_with_its_error_type(
    traced: Callable[..., tuple[InProcessGateway, Spans]], upstream: ScriptedUpstream
) -> None:
    gateway, spans = traced()
    # small: a 503, then a 429, then an answer scored low; large: a 500, then its answer.
    upstream.script("up-small", error(503), error(429), ok(confidence=0.3))
    upstream.script("up-large", error(500), ok(confidence=0.99))
    _ask(gateway)
    server, calls = spans.request()

    seen = [
        (_attrs(c)["cascade.model"], _attrs(c)["cascade.attempt"], _attrs(c).get("error.type")) for c in calls
    ]
    assert seen == [
        ("small", 0, "503"),
        ("small", 1, "429"),
        ("small", 2, None),
        ("large", 0, "500"),
        ("large", 1, None),
    ]
    for call in calls:
        assert call.parent is not None and call.parent.span_id == server.context.span_id
        failed = "error.type" in _attrs(call)
        assert (call.status.status_code is StatusCode.ERROR) == failed
        assert ("gen_ai.response.id" in _attrs(call)) != failed
    attrs = _attrs(server)
    assert attrs["cascade.outcome"] == "escalated" and attrs["cascade.reason"] == "low_score"
    assert attrs["cascade.answered_by"] == "large"


def test_a_streamed_escalation_traces_the_scored_stage_and_the_live_stage_with_its_first_chunk(
    traced: Callable[..., tuple[InProcessGateway, Spans]], upstream: ScriptedUpstream
) -> None:
    gateway, spans = traced()
    upstream.script("up-small", ok(confidence=0.3))
    upstream.script("up-large", ok(confidence=0.99))
    response = _ask(gateway, stream=True, stream_options={"include_usage": True})
    assert "data: [DONE]" in response.text
    server, (cheap, strong) = spans.request()

    assert _attrs(cheap)["cascade.streamed"] is False and _attrs(strong)["cascade.streamed"] is True
    live = _attrs(strong)
    assert live["gen_ai.request.model"] == "up-large" and live["gen_ai.response.model"] == "up-large"
    assert live["gen_ai.response.finish_reasons"] == ("stop",)
    assert live["gen_ai.usage.output_tokens"] > 0 and live["gen_ai.response.id"]
    assert 0 <= live["cascade.time_to_first_chunk_s"] <= (strong.end_time - strong.start_time) / 1e9  # type: ignore[operator]
    assert [e.name for e in strong.events] == ["cascade.first_chunk"]
    attrs = _attrs(server)
    assert attrs["cascade.outcome"] == "escalated" and attrs["cascade.score"] < attrs["cascade.threshold"]
    assert not [name for name in attrs if name.startswith("gen_ai.")]


def test_the_batched_spans_are_flushed_when_the_server_stops(
    traced: Callable[..., tuple[InProcessGateway, Spans]],
    upstream: ScriptedUpstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")  # no export on the batch's timer
    gateway, spans = traced(batch=True)
    _ask(gateway)
    assert spans.get_finished_spans() == ()
    gateway.stop()
    server, (call,) = spans.request()
    assert call.parent is not None and call.parent.span_id == server.context.span_id


def test_an_incoming_traceparent_makes_the_server_span_its_child(
    traced: Callable[..., tuple[InProcessGateway, Spans]], upstream: ScriptedUpstream
) -> None:
    gateway, spans = traced()
    _ask(gateway, headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
    server, calls = spans.request()
    assert format(server.context.trace_id, "032x") == TRACE_ID
    assert server.parent is not None and format(server.parent.span_id, "016x") == PARENT_ID
    assert server.parent.is_remote
    assert all(format(c.context.trace_id, "032x") == TRACE_ID for c in calls)


def test_a_black_box_scorer_call_is_a_client_span_of_its_own(
    traced: Callable[..., tuple[InProcessGateway, Spans]], upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    scorer = {"name": "verifier", "top_k": 5, "verifier": {"model": "medium"}}
    gateway, spans = traced(policy=str(write_policy(tmp_path / "verifier.json", scorer=scorer)))
    upstream.script("up-small", ok("42"))
    upstream.script("up-medium", ok("Yes", confidence=0.99))
    _ask(gateway)
    server, calls = spans.request()
    assert [_attrs(c)["gen_ai.request.model"] for c in calls] == ["up-small", "up-medium"]
    verifier = _attrs(calls[1])
    assert verifier["gen_ai.operation.name"] == "chat" and verifier["gen_ai.response.model"] == "up-medium"
    assert all(c.parent is not None and c.parent.span_id == server.context.span_id for c in calls)


def test_content_is_recorded_only_when_opted_in_and_redacted(
    traced: Callable[..., tuple[InProcessGateway, Spans]],
    upstream: ScriptedUpstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "sk-tracing-test-secret-0123456789"
    monkeypatch.setenv("TRACING_TEST_KEY", secret)
    gateway, spans = traced(capture_content=True)
    upstream.script("up-small", ok(f"the key is {secret}", confidence=0.99))
    # The gateway redacts every configured secret: the small model's key is one.
    gateway.gateway.tracing.redact = type(gateway.gateway.tracing.redact)([secret])
    _ask(gateway, messages=[{"role": "user", "content": f"Is {secret} my key?"}])
    _, (call,) = spans.request()
    sent, answered = _attrs(call)["gen_ai.input.messages"], _attrs(call)["gen_ai.output.messages"]
    assert '"role":"user"' in sent and "my key?" in sent and secret not in sent
    assert '"role":"assistant"' in answered and "the key is" in answered and secret not in answered


def test_tracing_is_off_without_config_or_otlp_variables_and_imports_no_sdk() -> None:
    assert not tracing_enabled(TracingConfig(), {})
    assert tracing_enabled(TracingConfig(), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing_enabled(TracingConfig(), {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://h/v1/traces"})
    assert not tracing_enabled(
        TracingConfig(), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h", "OTEL_SDK_DISABLED": "true"}
    )
    assert not tracing_enabled(TracingConfig(enabled=False), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h"})
    assert build_tracing(TracingConfig(enabled=False), Redactor()) is None
    # Off, nothing imports the SDK: outside the span module itself, OpenTelemetry is imported only
    # for type checking or inside a function (build_tracing, once tracing is on).
    assert _module_level_imports(REPO / "gateway", ("opentelemetry", "gateway.telemetry.otel_spans")) == [
        "gateway/telemetry/otel_spans.py"
    ]


def _module_level_imports(root: Path, names: tuple[str, ...]) -> list[str]:
    """The modules under ``root`` importing one of ``names`` at import time (not under
    ``if TYPE_CHECKING:``, not inside a function)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
                    break
                modules = [a.name for a in sub.names] if isinstance(sub, ast.Import) else []
                if isinstance(sub, ast.ImportFrom) and sub.module:
                    modules = [sub.module]
                if any(m == n or m.startswith(n + ".") for m in modules for n in names):
                    found.append(str(path.relative_to(root.parent)))
    return sorted(set(found))


class _Embeddings:
    """The embedding pool's seam (``EmbeddingPool.embed``): a vector, or none and why."""

    def __init__(self, why: str) -> None:
        self.why = why

    async def embed(self, text: str) -> tuple[Any, str]:
        return ([0.0] * 384 if self.why == "ok" else None), self.why


def test_the_routers_embedding_is_an_embeddings_span_under_the_request() -> None:
    spans = Spans()
    tracing = Tracing.with_exporter(spans, TracingConfig(enabled=True), Redactor(), batch=False)
    request = parse_request(orjson.dumps({"model": "cascade", "messages": QUESTION}), "chat")

    async def embed_twice() -> None:
        traced = tracing.request({"headers": [], "method": "POST"}, "/v1/chat/completions")
        for why in ("ok", "timeout"):
            runtime = RouterRuntime(GatewayMetrics(), _Embeddings(why))  # type: ignore[arg-type]
            await runtime.features(MINILM, request, "text")
        traced.span.end()

    asyncio.run(embed_twice())
    server, _ = spans.request()
    embeddings = [s for s in spans.get_finished_spans() if s.kind is SpanKind.INTERNAL]
    assert [s.name for s in embeddings] == ["embeddings minilm-v1"] * 2
    assert [_attrs(s).get("error.type") for s in embeddings] == [None, "timeout"]
    assert all(_attrs(s)["gen_ai.operation.name"] == "embeddings" for s in embeddings)
    assert all(s.parent is not None and s.parent.span_id == server.context.span_id for s in embeddings)
