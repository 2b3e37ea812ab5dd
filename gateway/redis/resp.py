"""A pipeline's replies read from a redis-py connection in one pass (RESP2), for ``RedisBatcher``.

redis-py's pure-Python parser (hiredis is not a dependency) awaits a coroutine for every line of
every reply, through ``asyncio.StreamReader.readline``; a spend reservation's reply is four lines, a
rate-limited key's eight, and each line cost about as much as the script's own arguments took to
pack. Here the bytes the socket has are taken at once (``StreamReader.read``, one await in the
common case) and the replies parsed from them synchronously, with the same results redis-py's
``read_response`` gives on the same connection: integers, ``None`` for nil, bulk and simple strings
decoded as the connection's encoder says, nested arrays as lists, an error reply as its
``ResponseError`` (subclass chosen by redis-py's own table), and a Redis error that is a connection
error (``LOADING``...) raised. A reply split across reads is parsed again from its start once more
bytes arrived.

Only for connections of the RESP2 protocol without a socket timeout of their own (the request-path
client, whose batcher bounds the whole pipeline): ``fast_connection`` tells them apart; any other
connection is read by redis-py. The caller disconnects a connection whose read failed part-way
(what redis-py's ``read_response`` does), so no stale reply is read by the next pipeline.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis._parsers.base import BaseParser
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse

# As much as one read takes: the replies of a batch are short (a few dozen bytes per command).
_READ_SIZE = 65536


class _Incomplete(Exception):
    """The buffer ends inside a reply: read more, then parse that reply again from its start."""


class _Decoding:
    """How bulk and simple strings are returned (the connection encoder's settings)."""

    __slots__ = ("decode", "encoding", "errors")

    def __init__(self, decode: bool, encoding: str, errors: str):
        self.decode, self.encoding, self.errors = decode, encoding, errors


def fast_connection(connection: AbstractConnection) -> bool:
    """Whether ``connection``'s replies can be read here (RESP2, no socket timeout, connected)."""
    return (
        connection.socket_timeout is None
        and connection.protocol in (2, "2")
        and getattr(connection, "_reader", None) is not None
    )


async def read_replies(connection: AbstractConnection, count: int, replies: list[Any]) -> None:
    """Append the next ``count`` replies of ``connection`` to ``replies``, each as soon as it is read
    (an error reply as its exception); raises on a closed connection or a protocol error."""
    reader = connection._reader
    if reader is None:
        raise RedisConnectionError("Connection closed by server.")
    encoder = connection.encoder
    decoding = _Decoding(encoder.decode_responses, encoder.encoding, encoder.encoding_errors)
    want = len(replies) + count
    buffer, pos = b"", 0
    while len(replies) < want:
        chunk = await reader.read(_READ_SIZE)
        if not chunk:
            raise RedisConnectionError("Connection closed by server.")
        buffer, pos = (buffer[pos:] + chunk if pos < len(buffer) else chunk), 0
        try:
            while len(replies) < want:
                reply, pos = _parse(buffer, pos, decoding)
                replies.append(reply)
        except _Incomplete:
            continue
    if pos != len(buffer):
        raise InvalidResponse("Protocol Error: bytes after the last reply of a pipeline")
    if connection.health_check_interval:  # as read_response: the connection was heard from now
        connection.next_health_check = asyncio.get_running_loop().time() + connection.health_check_interval


def _parse(buffer: bytes, pos: int, decoding: _Decoding) -> tuple[Any, int]:
    """The reply starting at ``pos`` and where the next one starts; _Incomplete if it is cut."""
    end = buffer.find(b"\r\n", pos)
    if end < 0:
        raise _Incomplete
    kind, after = buffer[pos], end + 2
    if kind == 58:  # ":" integer
        return int(buffer[pos + 1 : end]), after
    if kind == 36:  # "$" bulk string
        size = int(buffer[pos + 1 : end])
        if size < 0:
            return None, after
        stop = after + size
        if len(buffer) < stop + 2:
            raise _Incomplete
        data = buffer[after:stop]
        return (data.decode(decoding.encoding, decoding.errors) if decoding.decode else data), stop + 2
    if kind == 42:  # "*" array
        size = int(buffer[pos + 1 : end])
        if size < 0:
            return None, after
        items = []
        for _ in range(size):
            item, after = _parse(buffer, after, decoding)
            items.append(item)
        return items, after
    if kind == 43:  # "+" simple string
        line = buffer[pos + 1 : end]
        return (line.decode(decoding.encoding, decoding.errors) if decoding.decode else line), after
    if kind == 45:  # "-" error
        error = BaseParser.parse_error(buffer[pos + 1 : end].decode("utf-8", errors="replace"))
        if isinstance(error, RedisConnectionError):
            raise error
        return error, after
    raise InvalidResponse(f"Protocol Error: {buffer[pos:end]!r}")
