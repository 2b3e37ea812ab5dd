"""The request path's view of tracing (gateway.telemetry.tracing): the traced request and the
streamed attempt, in context variables that hold None when tracing is off.

``REQUEST_TRACE`` is the request's trace, set with its SERVER span by the endpoint: the upstream
client opens one span per attempt through it, the stage decision adds each scored stage's score,
the router its embedding. ``STREAM_ATTEMPT`` is a streamed attempt's span while its chunks are read
(gateway.streaming.sse shows it each chunk). The spans themselves are gateway.telemetry.otel_spans'.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Protocol

from gateway.config.settings import ModelConfig


class AttemptObserver(Protocol):
    """One model call's span (gateway.telemetry.otel_spans.AttemptSpan)."""

    def chunk(self, event: dict[str, Any]) -> None:
        """One parsed chunk of a streamed attempt."""

    def end(self, error_type: str | None, answer: dict[str, Any] | None = None) -> None:
        """End it: answered, or failed with ``error_type``."""


class RequestObserver(Protocol):
    """One request's trace (gateway.telemetry.otel_spans.RequestTrace)."""

    def attempt(
        self, model: str, config: ModelConfig, kind: str, body: bytes, number: int
    ) -> AttemptObserver:
        """The span of attempt ``number`` of a call to ``model``."""

    def embedding(self, feature_set: str) -> AttemptObserver:
        """The span of the router's embedding of the request."""

    def stage(self, model: str, score: float | None, threshold: float) -> None:
        """A scored stage's score against its threshold."""


REQUEST_TRACE: ContextVar[RequestObserver | None] = ContextVar("cascade_request_trace", default=None)
STREAM_ATTEMPT: ContextVar[AttemptObserver | None] = ContextVar("cascade_stream_attempt", default=None)
