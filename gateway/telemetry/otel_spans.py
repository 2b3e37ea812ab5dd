"""The spans of gateway.telemetry.tracing, made with the OpenTelemetry SDK (imported only when on).

One SERVER span per request (``RequestTrace``: HTTP attributes, then the cascade's ``cascade.*``
decision when it ends) and one CLIENT span per upstream attempt under it (``AttemptSpan``: the
GenAI semantic conventions' ``gen_ai.*`` attributes, retries and failed attempts included, each
its own span with its ``error.type``). The GenAI conventions followed are those of semantic
conventions ``SEMCONV_VERSION`` (development status: what
``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`` selected then), with the older
``gen_ai.system`` set beside ``gen_ai.provider.name`` for receivers of earlier versions. Spans are
exported by a ``BatchSpanProcessor`` (a background thread, off the request path); ``shutdown``
flushes it at server stop.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from contextvars import Token
from typing import Any
from urllib.parse import urlsplit

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.config.settings import ModelConfig, TracingConfig
from gateway.telemetry.trace_context import REQUEST_TRACE, RequestObserver
from redaction import Redactor

SEMCONV_VERSION = "1.37.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
# The upstreams speak the OpenAI API (any OpenAI-compatible server): the provider as the
# conventions name the API's.
PROVIDER = "openai"
_OPERATIONS = {"chat": "chat", "completions": "text_completion"}
_PROPAGATOR = TraceContextTextMapPropagator()
_TRACE_HEADERS = frozenset({b"traceparent", b"tracestate"})


class Tracing:
    """The gateway's tracer provider and what every span it makes shares."""

    def __init__(self, provider: TracerProvider, capture_content: bool, redact: Redactor):
        """``capture_content``: record prompts and answers (through ``redact``)."""
        self.provider = provider
        self.tracer = provider.get_tracer("cascade-gateway", schema_url=SCHEMA_URL)
        self.capture_content = capture_content
        self.redact = redact

    @classmethod
    def exporting(cls, config: TracingConfig, redact: Redactor) -> Tracing:
        """Spans exported by OTLP/HTTP to ``config.endpoint``, else where the OTEL_* variables say."""
        protocol = (
            os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "http/protobuf"
        )
        if protocol != "http/protobuf":
            raise ValueError(f"tracing: OTLP protocol {protocol!r} is not supported (only http/protobuf)")
        exporter = OTLPSpanExporter(endpoint=config.endpoint) if config.endpoint else OTLPSpanExporter()
        return cls.with_exporter(exporter, config, redact)

    @classmethod
    def with_exporter(
        cls, exporter: SpanExporter, config: TracingConfig, redact: Redactor, *, batch: bool = True
    ) -> Tracing:
        """Spans handed to ``exporter`` (batched; ``batch=False``: as each ends, for tests)."""
        service = os.environ.get("OTEL_SERVICE_NAME") or config.service_name
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))
        return cls(provider, config.capture_content, redact)

    def request(self, scope: Mapping[str, Any], path: str) -> RequestTrace:
        """The SERVER span of one request (the child of its ``traceparent``, if any), made current."""
        headers = scope["headers"]
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers if k in _TRACE_HEADERS}
        parent = _PROPAGATOR.extract(carrier) if carrier else None
        attributes: dict[str, Any] = {
            "http.request.method": scope.get("method", "POST"),
            "http.route": path,
            "url.path": path,
            "url.scheme": scope.get("scheme", "http"),
            "network.protocol.version": scope.get("http_version", "1.1"),
        }
        if server := scope.get("server"):
            attributes["server.address"], attributes["server.port"] = server[0], server[1]
        if client := scope.get("client"):
            attributes["client.address"] = client[0]
        span = self.tracer.start_span(f"POST {path}", parent, SpanKind.SERVER, attributes)
        return RequestTrace(self, span)

    def shutdown(self) -> None:
        """Export what is queued and stop (at server stop)."""
        self.provider.shutdown()


class RequestTrace:
    """One request's SERVER span, current (for the OpenTelemetry context and ``REQUEST_TRACE``)
    from its start to ``end``; the request's attempts open their CLIENT spans through it."""

    __slots__ = ("_context_token", "_trace_token", "span", "tracing")

    def __init__(self, tracing: Tracing, span: Span):
        self.tracing = tracing
        self.span = span
        self._context_token = otel_context.attach(trace.set_span_in_context(span))
        self._trace_token: Token[RequestObserver | None] = REQUEST_TRACE.set(self)

    def attempt(self, model: str, config: ModelConfig, kind: str, body: bytes, number: int) -> AttemptSpan:
        """The CLIENT span of attempt ``number`` (0: the first) of a call to ``model``."""
        tracing, sent = self.tracing, _json(body)
        operation = _OPERATIONS.get(kind, kind)
        request_model = sent.get("model") if isinstance(sent.get("model"), str) else config.model
        url = urlsplit(config.base_url)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.system": PROVIDER,
            "gen_ai.request.model": request_model,
            "server.address": url.hostname or "",
            "server.port": url.port or (443 if url.scheme == "https" else 80),
            "cascade.model": model,
            "cascade.attempt": number,
            "cascade.streamed": sent.get("stream") is True,
        }
        for field, name in (("max_tokens", "max_tokens"), ("max_completion_tokens", "max_tokens")):
            if isinstance(sent.get(field), int):
                attributes[f"gen_ai.request.{name}"] = sent[field]
        if isinstance(sent.get("temperature"), int | float):
            attributes["gen_ai.request.temperature"] = sent["temperature"]
        if tracing.capture_content:
            attributes["gen_ai.input.messages"] = tracing.redact(_dumps(_input_messages(sent)))
        name = f"{operation} {request_model}"
        span = tracing.tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)
        return AttemptSpan(span, tracing.capture_content, tracing.redact)

    def embedding(self, feature_set: str) -> AttemptSpan:
        """The span of the router's embedding of the request (a local model, computed in its
        worker processes: INTERNAL, no provider); ended with the pool's reason when it gave none."""
        attributes = {"gen_ai.operation.name": "embeddings", "gen_ai.request.model": feature_set}
        span = self.tracing.tracer.start_span(
            f"embeddings {feature_set}", kind=SpanKind.INTERNAL, attributes=attributes
        )
        return AttemptSpan(span, False, self.tracing.redact)

    def stage(self, model: str, score: float | None, threshold: float) -> None:
        """A scored stage's score against its threshold (an event on the request's span)."""
        attributes: dict[str, Any] = {"cascade.stage.model": model, "cascade.threshold": threshold}
        if score is not None:
            attributes["cascade.score"] = score
        self.span.add_event("cascade.stage", attributes)

    def end(self, request: Any) -> None:
        """End the span with the request's outcome (the endpoint's request record), and stop
        being current."""
        span, facts = self.span, request.facts
        status = request.status
        attributes: dict[str, Any] = {
            "http.response.status_code": status,
            "cascade.request_id": request.request_id,
            "cascade.tier": request.tier,
            "cascade.outcome": request.outcome,
        }
        if facts is not None:
            optional = {
                "cascade.mechanism": facts.mechanism,
                "cascade.policy_id": facts.policy_id,
                "cascade.answered_by": facts.answered_by,
                "cascade.score": facts.score,
                "cascade.threshold": facts.threshold,
            }
            attributes.update({k: v for k, v in optional.items() if v is not None})
            attributes["cascade.cost_usd"] = facts.cost_usd
            attributes["cascade.models_called"] = list(facts.models_called)
            if facts.escalation_reasons:
                attributes["cascade.reason"] = facts.escalation_reasons[-1]
                attributes["cascade.escalation_reasons"] = list(facts.escalation_reasons)
        span.set_attributes(attributes)
        if status >= 500:
            span.set_attribute("error.type", str(status))
            span.set_status(Status(StatusCode.ERROR))
        REQUEST_TRACE.reset(self._trace_token)
        otel_context.detach(self._context_token)
        span.end()


class AttemptSpan:
    """One upstream attempt's CLIENT span: ended with its answer's ``gen_ai.response.*`` and
    ``gen_ai.usage.*``, or with its ``error.type``. A streamed attempt reads them from its chunks
    (``chunk``), the first of which sets ``cascade.time_to_first_chunk_s``."""

    __slots__ = ("capture", "finish_reasons", "first_chunk", "redact", "response", "span", "started", "text")

    def __init__(self, span: Span, capture: bool, redact: Redactor):
        self.span = span
        self.capture = capture
        self.redact = redact
        self.started = time.monotonic()
        self.first_chunk = False
        self.response: dict[str, Any] = {}
        self.finish_reasons: list[str] = []
        self.text: list[str] = []

    def chunk(self, event: dict[str, Any]) -> None:
        """One parsed chunk of the attempt's stream."""
        if not self.first_chunk:
            self.first_chunk = True
            self.span.set_attribute("cascade.time_to_first_chunk_s", time.monotonic() - self.started)
            self.span.add_event("cascade.first_chunk")
        for key in ("id", "model", "usage"):
            if event.get(key) is not None:
                self.response[key] = event[key]
        for choice in event.get("choices") or ():
            if choice.get("finish_reason"):
                self.finish_reasons.append(str(choice["finish_reason"]))
            if self.capture:
                delta = choice.get("delta")
                part = (delta if isinstance(delta, dict) else choice).get("content") or choice.get("text")
                if isinstance(part, str):
                    self.text.append(part)

    def end(self, error_type: str | None, answer: dict[str, Any] | None = None) -> None:
        """End the span: answered (``answer``: a non-streamed one; a stream's was read by
        ``chunk``), or failed with ``error_type``."""
        span = self.span
        response = answer if answer is not None else self.response
        if answer is not None:
            choices = _choices(answer)
            self.finish_reasons = [str(c["finish_reason"]) for c in choices if c.get("finish_reason")]
        attributes: dict[str, Any] = {}
        if isinstance(response.get("id"), str):
            attributes["gen_ai.response.id"] = response["id"]
        if isinstance(response.get("model"), str):
            attributes["gen_ai.response.model"] = response["model"]
        if self.finish_reasons:
            attributes["gen_ai.response.finish_reasons"] = self.finish_reasons
        usage = response.get("usage")
        if isinstance(usage, dict):
            for field, name in (("prompt_tokens", "input_tokens"), ("completion_tokens", "output_tokens")):
                if isinstance(usage.get(field), int):
                    attributes[f"gen_ai.usage.{name}"] = usage[field]
        if self.capture and (answer is not None or self.text):
            attributes["gen_ai.output.messages"] = self.redact(_dumps(self._output(answer)))
        span.set_attributes(attributes)
        if error_type is not None:
            span.set_attribute("error.type", error_type)
            span.set_status(Status(StatusCode.ERROR))
        span.end()

    def _output(self, answer: dict[str, Any] | None) -> list[dict[str, Any]]:
        if answer is None:
            reason = self.finish_reasons[-1] if self.finish_reasons else None
            return [_message("assistant", "".join(self.text), reason)]
        out = []
        for choice in _choices(answer):
            message = choice.get("message")
            content = message.get("content") if isinstance(message, dict) else choice.get("text")
            out.append(_message("assistant", content, choice.get("finish_reason")))
        return out


def _json(body: bytes) -> dict[str, Any]:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _dumps(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def _choices(answer: Mapping[str, Any]) -> Sequence[dict[str, Any]]:
    choices = answer.get("choices")
    return [c for c in choices if isinstance(c, dict)] if isinstance(choices, list) else []


def _message(role: Any, content: Any, finish_reason: Any = None) -> dict[str, Any]:
    """One message in the conventions' shape: a role and its parts (text, else the raw content)."""
    if isinstance(content, str):
        parts = [{"type": "text", "content": content}]
    elif content is None:
        parts = []
    else:
        parts = [{"type": "text", "content": _dumps(content)}]
    message: dict[str, Any] = {"role": role, "parts": parts}
    if finish_reason is not None:
        message["finish_reason"] = finish_reason
    return message


def _input_messages(sent: dict[str, Any]) -> list[dict[str, Any]]:
    messages = sent.get("messages")
    if isinstance(messages, list):
        return [_message(m.get("role"), m.get("content")) for m in messages if isinstance(m, dict)]
    prompt = sent.get("prompt")
    return [_message("user", prompt)] if prompt is not None else []
