"""One HTTP exchange with a client, as the endpoints see it: the send side (whether the response
has started or ended, whether the client left), the request body read under its size limit, and the
watcher that cancels a request's work when its client disconnects."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import Receive, Send

from gateway.wire.errors import BodyTooLargeError

# Response headers as the ASGI send takes them: (lower-case name, value) pairs, in order.
Headers = list[tuple[bytes, bytes]]


class ClientGone(Exception):
    """The client disconnected before its request body arrived."""


class Exchange:
    """One HTTP exchange's send side, remembering whether the response has started."""

    __slots__ = ("done", "gone", "headers", "send", "started")

    def __init__(self, send: Send):
        self.send = send
        self.started = False
        self.done = False
        self.gone = False
        self.headers: Headers = []  # the headers sent (the console's record shows them)

    async def start(self, status: int, headers: Headers) -> None:
        self.started = True
        self.headers = headers
        await self.send({"type": "http.response.start", "status": status, "headers": headers})

    async def body(self, data: bytes, more: bool = True) -> None:
        if not more:
            self.done = True  # from here on a disconnect is the normal end of the exchange
        await self.send({"type": "http.response.body", "body": data, "more_body": more})


async def read_body(receive: Receive, content_length: bytes | None, limit: int) -> bytes:
    """The request body, refusing more than ``limit`` bytes (413) before or while reading."""
    if content_length is not None:
        try:
            declared = int(content_length)
        except ValueError:
            declared = 0
        if declared > limit:
            raise BodyTooLargeError(f"request body of {declared} bytes exceeds the limit of {limit} bytes")
    message = await receive()
    if message["type"] == "http.disconnect":
        raise ClientGone
    body: bytes = message.get("body", b"")
    if not message.get("more_body"):
        if len(body) > limit:
            raise BodyTooLargeError(f"request body exceeds the limit of {limit} bytes")
        return body
    chunks, size = [body], len(body)
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def client_left(exchange: Exchange, task: asyncio.Task[Any]) -> None:
    """The client disconnected: cancel the request's task (and with it every upstream call),
    unless its response was already sent in full."""
    if not exchange.done:
        exchange.gone = True
        task.cancel()


async def watch_disconnect(receive: Receive, exchange: Exchange, task: asyncio.Task[Any]) -> None:
    """Wait for the client's disconnect, then ``client_left`` (for servers without the
    disconnect hook of gateway.api.request_cycle)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            client_left(exchange, task)
            return
