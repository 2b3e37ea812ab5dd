"""How ``cascade serve`` runs uvicorn: JSON-lines logs and a timeout on slow request headers.

* uvicorn's own loggers (``uvicorn``, ``uvicorn.error``, ``uvicorn.access``) write the same JSON
  lines as the gateway (``gateway.logs``), so a log pipeline never meets a plain-text line.
* Requests too malformed for the app to see get an OpenAI-shaped 400 (not uvicorn's plain text).
* uvicorn has no timeout for a request's headers: a client that opens connections and sends headers
  one byte at a time (slowloris) would hold them forever. ``gateway_http_protocol`` closes a
  connection whose request line and headers are not complete within ``limits.header_timeout_s``
  seconds of the connection opening (or of the previous response, on a keep-alive connection),
  answering 408 when no response is in flight.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.logs import JsonLinesFormatter

_REQUEST_TIMEOUT_BODY = (
    b'{"error": {"message": "request headers were not received in time", '
    b'"type": "invalid_request_error", "param": null, "code": "request_timeout"}}'
)
_REQUEST_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: %d\r\n\r\n%s" % (len(_REQUEST_TIMEOUT_BODY), _REQUEST_TIMEOUT_BODY)
)


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


def gateway_http_protocol(header_timeout_s: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, closing connections whose headers take over ``header_timeout_s``.

    Requests too malformed to reach the app (a bad request line, a non-numeric Content-Length) get
    uvicorn's 400 with an OpenAI error body instead of plain text.
    """
    timeout_s = header_timeout_s

    class GatewayHttpProtocol(HttpToolsProtocol):
        header_timeout_s = timeout_s

        def send_400_response(self, msg: str) -> None:
            body = orjson.dumps(
                {
                    "error": {
                        "message": msg,
                        "type": "invalid_request_error",
                        "param": None,
                        "code": "invalid_http_request",
                    }
                }
            )
            self.transport.write(
                b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nconnection: close\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(body), body)
            )
            self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._header_timer: asyncio.TimerHandle | None = None
            self._arm_header_timer()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm_header_timer()  # a keep-alive connection's next request

        def on_headers_complete(self) -> None:
            self._disarm_header_timer()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_header_timer()
            super().connection_lost(exc)

        def _arm_header_timer(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

        def _disarm_header_timer(self) -> None:
            timer = getattr(self, "_header_timer", None)
            if timer is not None:
                timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.transport.is_closing():
                return
            if self.cycle is None or self.cycle.response_complete:
                self.transport.write(_REQUEST_TIMEOUT_RESPONSE)
            self.logger.warning(
                "request headers not complete within %.1fs: connection closed", self.header_timeout_s
            )
            self.transport.close()

    return GatewayHttpProtocol
