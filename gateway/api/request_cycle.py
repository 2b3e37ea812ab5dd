"""The request cycle ``cascade serve`` runs each request in: uvicorn's, with a cheaper response head
and a disconnect hook instead of a watcher task.

* **Response head.** uvicorn checks each response header name and value with a regular expression
  of its own (two searches a header; a gateway answer carries about fifteen headers, the
  ``x-cascade-*`` decision among them). ``GatewayRequestCycle`` checks all the names joined, and
  all the values joined, for the bytes those expressions refuse (a refused byte is in the join
  exactly when it is in one of the parts; each expression is one character class, so the set
  of bytes it refuses is exact), then writes the head as uvicorn does; it
  writes the body messages too, as uvicorn does, without awaiting uvicorn's ``send`` from its
  own. A head the joined check refuses, a body longer than its Content-Length, and anything out
  of the ordinary (a paused or lost connection, the access log on, a HEAD request, a message out
  of order) go through uvicorn's own ``send``, which raises its usual errors.
* **Disconnect hook.** A request whose upstream calls must stop when its client leaves would
  otherwise keep a task waiting on ``receive`` for the disconnect (``watch_disconnect``). Under
  ``cascade serve`` the protocol (gateway.api.serving) offers ``ON_DISCONNECT`` in the scope: the
  app stores a callable there and the protocol calls it when the connection is lost before the
  response completed, as uvicorn's ``receive`` would have answered ``http.disconnect``. Any other
  server (tests' ASGI transports) lacks the key, and the app keeps its watcher task. A connection
  lost before the app stored its hook (while it read, authenticated and reserved) leaves
  ``CONNECTION_LOST`` there instead, which the app reads as the client gone when it would store
  the hook: otherwise that request would run its upstream calls for nobody.

uvicorn's cycle is private; tests/gateway/test_serving_uvicorn_internals.py checks the shape this
relies on, and pyproject pins uvicorn to the versions it passes on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    RequestResponseCycle,
)

# The bytes uvicorn's header expressions refuse (each is one character class): deleting them
# with bytes.translate finds a refused byte at a few instructions a byte, against a few tens for
# a regular-expression search.
_NAME_REFUSED = bytes(b for b in range(256) if HEADER_RE.fullmatch(bytes((b,))))
_VALUE_REFUSED = bytes(b for b in range(256) if HEADER_VALUE_RE.fullmatch(bytes((b,))))

# The scope key of the disconnect hook (None until the app stores a callable).
ON_DISCONNECT = "cascade.on_disconnect"
DisconnectHook = Callable[[], None]


def _lost_before_the_hook() -> None:
    """Never called: a marker, stored in place of a hook the connection was lost before."""


# The value ``disconnected`` leaves at ``ON_DISCONNECT`` when no hook was stored yet.
CONNECTION_LOST: DisconnectHook = _lost_before_the_hook


class GatewayRequestCycle(RequestResponseCycle):
    """uvicorn's request cycle writing the response head with two header checks in all, and the
    body without a second coroutine (uvicorn's ``send`` for anything out of the ordinary)."""

    async def send(self, message: Any) -> None:
        """The ASGI send: a response's head and body written here, anything else by uvicorn."""
        if not (self.disconnected or self.flow.write_paused or self.access_log):
            if not self.response_started:
                if message["type"] == "http.response.start" and self._start(message):
                    return
            elif (
                not self.response_complete
                and message["type"] == "http.response.body"
                and self.scope["method"] != "HEAD"
                and self._body(message)
            ):
                return
        await RequestResponseCycle.send(self, message)

    def _start(self, message: Any) -> bool:
        """Write the head; False (nothing done) when a header would be refused: uvicorn raises."""
        headers = self.default_headers + list(message.get("headers", ()))
        names = b"".join([name for name, _ in headers])
        values = b"".join([value for _, value in headers])
        if len(names.translate(None, _NAME_REFUSED)) != len(names) or len(
            values.translate(None, _VALUE_REFUSED)
        ) != len(values):
            return False
        self.response_started = True
        self.waiting_for_100_continue = False
        self.transport.write(self._head(message["status"], headers))
        return True

    def _body(self, message: Any) -> bool:
        """Write a body message as uvicorn does; False (nothing done) when it is longer than the
        Content-Length left: uvicorn raises."""
        body = message.get("body", b"")
        more_body = message.get("more_body", False)
        if self.chunked_encoding:
            content = [b"%x\r\n" % len(body), body, b"\r\n"] if body else []
            if not more_body:
                content.append(b"0\r\n\r\n")
            self.transport.write(b"".join(content))
        else:
            if len(body) > self.expected_content_length:
                return False
            self.expected_content_length -= len(body)
            self.transport.write(body)
        if not more_body:
            if self.expected_content_length != 0:
                raise RuntimeError("Response content shorter than Content-Length")
            self.response_complete = True
            self.message_event.set()
            if not self.keep_alive:
                self.transport.close()
            self.on_response()
        return True

    def _head(self, status_code: int, headers: list[tuple[bytes, bytes]]) -> bytes:
        """The status line and headers as uvicorn writes them (its framing decisions included)."""
        content = [STATUS_LINE[status_code]]
        has_connection_close = False
        for name, value in headers:
            name = name.lower()
            if name == b"content-length" and self.chunked_encoding is None:
                self.expected_content_length = int(value.decode())
                self.chunked_encoding = False
            elif name == b"transfer-encoding" and value.lower() == b"chunked":
                self.expected_content_length = 0
                self.chunked_encoding = True
            elif name == b"connection" and b"close" in [t.lower().strip() for t in value.split(b",")]:
                self.keep_alive = False
                has_connection_close = True
            content += (name, b": ", value, b"\r\n")
        if not self.keep_alive and not has_connection_close:
            content.append(b"connection: close\r\n")
        if self.chunked_encoding is None and self.scope["method"] != "HEAD" and status_code not in (204, 304):
            self.chunked_encoding = True
            content.append(b"transfer-encoding: chunked\r\n")
        content.append(b"\r\n")
        return b"".join(content)


def adopt(cycle: RequestResponseCycle | None) -> None:
    """Make uvicorn's new cycle a ``GatewayRequestCycle`` and offer the disconnect hook.

    Called as soon as uvicorn built the cycle, before its ASGI task first runs (the task looks
    ``send`` up on the cycle when it starts).
    """
    if cycle is not None and type(cycle) is RequestResponseCycle:
        cycle.__class__ = GatewayRequestCycle
        cycle.scope[ON_DISCONNECT] = None  # type: ignore[literal-required]


def disconnected(cycle: RequestResponseCycle | None) -> None:
    """The connection was lost: call the hook of a cycle whose response had not completed, or,
    before the app stored one, leave ``CONNECTION_LOST`` for it to find."""
    if cycle is not None and not cycle.response_complete and ON_DISCONNECT in cycle.scope:
        hook: DisconnectHook | None = cycle.scope[ON_DISCONNECT]  # type: ignore[literal-required]
        if hook is None:
            cycle.scope[ON_DISCONNECT] = CONNECTION_LOST  # type: ignore[literal-required]
        elif hook is not CONNECTION_LOST:
            hook()
