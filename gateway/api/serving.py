"""How ``cascade serve`` runs uvicorn: JSON-lines logs and bounds on slow or huge request heads and bodies.

* uvicorn's own loggers (``uvicorn``, ``uvicorn.error``, ``uvicorn.access``) write the same JSON
  lines as the gateway (``gateway.wire.logs``), so a log pipeline never meets a plain-text line.
* Requests too malformed for the app to see get an OpenAI-shaped 400 (not uvicorn's plain text).
* uvicorn bounds neither the time a request's head or body may take nor (with httptools) the size
  of the head. ``gateway_http_protocol`` adds, from the config's ``limits`` section:

  - ``header_timeout_s``: the request line and headers must be complete within this many seconds of
    the connection opening (or of the previous response, on a keep-alive connection), else 408 and
    the connection is closed (slowloris);
  - ``body_timeout_s``: the body must be complete within this many seconds of the end of the
    headers, else 408 and the connection is closed (a body trickled one byte at a time);
  - ``max_header_bytes`` and ``max_headers``: a request head (request line and headers) larger than
    this, or with more header fields, is answered 431 and the connection is closed. httptools
    buffers a header field until it ends, so the size is also counted as the bytes arrive: a head
    that keeps growing is refused once more than ``max_header_bytes`` of it arrived after the read
    in which it began. The gateway buffers at most about ``max_header_bytes`` plus two socket reads
    (256 KiB each) of any head, however long the client keeps sending.

  A 408 or 431 is written only while no response is in flight on the connection (otherwise the
  connection is just closed). The checks on the hot path are a few attribute reads per socket
  read; a timer is armed only while a head or body is incomplete (docs/operations.md).
* Each request runs in ``gateway.api.request_cycle.GatewayRequestCycle`` (a cheaper response head)
  and gets the disconnect hook that module describes.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.api.request_cycle import adopt, disconnected
from gateway.config.settings import LimitsConfig
from gateway.wire.logs import JsonLinesFormatter

# Per header line: ": " and CRLF around the name and value httptools hands over; per request line:
# method, spaces, "HTTP/1.1" and CRLF (at most), and the empty line that ends the head.
_HEADER_FRAMING = 4
_REQUEST_LINE_FRAMING = 32


def _error_response(status_line: bytes, message: str, code: str) -> bytes:
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    body = json.dumps({"error": error}).encode()
    return (
        b"HTTP/1.1 %s\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
        % (
            status_line,
            len(body),
            body,
        )
    )


_HEADERS_TIMEOUT_RESPONSE = _error_response(
    b"408 Request Timeout", "request headers were not received in time", "request_timeout"
)
_BODY_TIMEOUT_RESPONSE = _error_response(
    b"408 Request Timeout", "request body was not received in time", "request_timeout"
)


# Set in the scope of a request whose body the protocol cut off (answered 408): the app, which then
# sees a disconnect, logs the 408 the client got instead of a client that went away.
BODY_TIMED_OUT = "cascade.body_timed_out"


class _HeadTooLarge(Exception):
    """Raised from a parser callback to stop parsing a head over the limits (answered 431)."""


class UvicornJsonFormatter(JsonLinesFormatter):
    """The gateway's JSON lines, plus the uvicorn logger's name (``uvicorn.error``, ...)."""

    def format(self, record: logging.LogRecord) -> str:
        record.fields = {"logger": record.name, **(getattr(record, "fields", None) or {})}
        return super().format(record)


def uvicorn_log_config(level: str = "warning") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for uvicorn's loggers: JSON lines on stderr."""
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": UvicornJsonFormatter}},
        "handlers": {"stderr": handler},
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "uvicorn.error": {"level": level.upper()},
            "uvicorn.access": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
        },
    }


# The config's bounds the protocol enforces (class attributes of GatewayHttpProtocol).
_BOUNDS = ("header_timeout_s", "body_timeout_s", "max_header_bytes", "max_headers")
_DEFAULT_LIMITS = LimitsConfig()


class GatewayHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with head and body bounds (see the module docstring).

    Requests too malformed to reach the app (a bad request line, a non-numeric Content-Length) get
    uvicorn's 400 with an OpenAI error body instead of plain text. uvicorn creates the protocol
    itself, so the bounds are class attributes: ``gateway_http_protocol(limits)`` is the subclass
    with a config's. It overrides private uvicorn internals (parser callbacks, ``cycle``,
    ``pipeline``): pyproject pins uvicorn to the versions the tests run, and
    tests/gateway/test_serving_uvicorn_internals.py fails if those internals change shape.
    """

    header_timeout_s: float = _DEFAULT_LIMITS.header_timeout_s
    body_timeout_s: float = _DEFAULT_LIMITS.body_timeout_s
    max_header_bytes: int = _DEFAULT_LIMITS.max_header_bytes
    max_headers: int = _DEFAULT_LIMITS.max_headers

    # --- uvicorn hooks --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_cycle: Any = None  # the request whose body the body timer watches
        self._refusal: str | None = None  # why the head being parsed is refused (431)
        self._read = b""  # the socket read being parsed
        self._head_began_in: bytes | None = None  # the read in which the open head began
        self._head_rest = 0  # bytes of the later reads (all head) while the head stays open
        self._in_body = False  # headers complete, body maybe not
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        self._read = data
        HttpToolsProtocol.data_received(self, data)
        began = self._head_began_in
        if began is not None:
            if began is not data:  # the head began in an earlier read: all of this one is head
                self._head_rest += len(data)
                if self._head_rest > self.max_header_bytes:
                    self._head_began_in = None
                    self._refuse_head(f"request headers exceed {self.max_header_bytes} bytes")
        elif self._in_body:
            if not self.cycle.more_body:
                self._in_body = False  # the usual case: the whole body came with the headers
            elif self._body_timer is None and not self.transport.is_closing():
                self._arm_body_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_began_in, self._head_rest = self._read, 0
        self._arm_header_timer()  # a keep-alive connection's next request

    def on_headers_complete(self) -> None:
        self._disarm_header_timer()
        began, self._head_began_in = self._head_began_in, None
        if len(self.headers) > self.max_headers:
            self._refusal = f"more than {self.max_headers} request header fields"
            raise _HeadTooLarge(self._refusal)
        # The head fits in what was read since it began: measure it only when that is too much.
        if len(began or b"") + self._head_rest + len(self._read) > self.max_header_bytes:
            size = len(self.url) + _REQUEST_LINE_FRAMING
            size += sum(len(name) + len(value) + _HEADER_FRAMING for name, value in self.headers)
            if size > self.max_header_bytes:
                self._refusal = f"request headers exceed {self.max_header_bytes} bytes"
                raise _HeadTooLarge(self._refusal)
        self._in_body = True
        super().on_headers_complete()
        adopt(self.cycle)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a parser error: our 431 if a callback refused the head, else 400."""
        if self._refusal is not None:
            self._refuse_head(self._refusal)
            return
        self.transport.write(_error_response(b"400 Bad Request", msg, "invalid_http_request"))
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        self._disarm_body_timer()
        super().connection_lost(exc)
        disconnected(self.cycle)

    # --- the bounds -----------------------------------------------------------------------------

    def _refuse_head(self, reason: str) -> None:
        self._disarm_header_timer()
        if self.transport.is_closing():
            return
        if self._no_response_in_flight():
            self.transport.write(
                _error_response(b"431 Request Header Fields Too Large", reason, "headers_too_large")
            )
        self.logger.warning("%s: 431, connection closed", reason)
        self.transport.close()

    def _no_response_in_flight(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm_header_timer(self) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
            self._header_timer = None

    def _disarm_body_timer(self) -> None:
        timer = getattr(self, "_body_timer", None)
        if timer is not None:
            timer.cancel()
            self._body_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        if self._no_response_in_flight():
            self.transport.write(_HEADERS_TIMEOUT_RESPONSE)
        self.logger.warning(
            "request headers not complete within %.1fs: connection closed", self.header_timeout_s
        )
        self.transport.close()

    def _arm_body_timer(self) -> None:
        self._body_cycle = self.cycle
        self._body_timer = self.loop.call_later(self.body_timeout_s, self._body_too_slow)

    def _body_too_slow(self) -> None:
        self._body_timer = None
        cycle, self._body_cycle = self._body_cycle, None
        if self.transport.is_closing():
            return
        if cycle is not self.cycle or not cycle.more_body:
            # That body was complete (the timer is not cancelled then); watch the current one.
            if self._in_body and self.cycle.more_body:
                self._arm_body_timer()
            return
        # A queued pipelined request's cycle is not the one writing: then only close.
        if not self.pipeline and not cycle.response_started:
            cycle.scope[BODY_TIMED_OUT] = True  # type: ignore[literal-required]
            self.transport.write(_BODY_TIMEOUT_RESPONSE)
        self.logger.warning("request body not complete within %.1fs: connection closed", self.body_timeout_s)
        self.transport.close()


def gateway_http_protocol(limits: LimitsConfig) -> type[GatewayHttpProtocol]:
    """``GatewayHttpProtocol`` with the head and body bounds of ``limits`` (uvicorn's ``http``)."""
    bounds = {name: getattr(limits, name) for name in _BOUNDS}
    return type("GatewayHttpProtocol", (GatewayHttpProtocol,), bounds)
