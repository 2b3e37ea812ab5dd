"""What the engine hands on: the final stage still to call, and a streamed request's client events.

``FinalStage`` is what the scored stages come to when no answer was accepted (gateway.engine.cascade,
gateway.streaming.prefix_stream). ``StreamStart``, ``StreamChunk`` and ``StreamFailed`` are the
client-ready events of a streamed request: the engine and the live relay (gateway.streaming.live)
yield them, the endpoint (gateway.api.endpoint) only writes them. Their own module, on a floor both
the streaming room and the engine import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway.wire.errors import GatewayError


@dataclass(slots=True)
class FinalStage:
    """The last stage of a route, still to call, and the answer to fall back on if it fails."""

    model: str
    fallback: dict[str, Any] | None = None
    fallback_model: str | None = None


@dataclass(slots=True, frozen=True)
class StreamStart:
    """Start the 200 SSE response with these headers (SSE headers and the ``x-cascade-*`` facts)."""

    headers: list[tuple[bytes, bytes]]


@dataclass(slots=True, frozen=True)
class StreamChunk:
    """Bytes of the SSE body; ``last`` ends the response."""

    data: bytes
    last: bool = False


@dataclass(slots=True, frozen=True)
class StreamFailed:
    """The stream failed after it started: end it with this error as an SSE ``error`` event."""

    error: GatewayError

    @property
    def data(self) -> bytes:
        """The SSE ``error`` event (OpenAI error body) that ends the response."""
        return sse_error(self.error)


StreamEvent = StreamStart | StreamChunk | StreamFailed


def sse_error(error: GatewayError) -> bytes:
    """An SSE ``error`` event carrying the OpenAI error body."""
    return b"event: error\ndata: " + orjson.dumps(error.body()) + b"\n\n"
