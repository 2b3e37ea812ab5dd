"""Helpers for tests against the real Redis at 127.0.0.1:6379: private key prefixes and a cuttable link.

Every test uses its own key prefix (keys *and* pub/sub channel), so tests never see each other's
policy, keys or spend, and the contract names under ``cascade:`` are never touched. ``RedisLink``
is a loopback TCP forwarder in front of the real Redis: closing it makes Redis "go away" for the
clients that connect through it, without disturbing anyone else using the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid

import redis

from gateway.redis.keys import RedisKeys

REDIS_URL = "redis://127.0.0.1:6379/0"


def fresh_prefix() -> str:
    """A key prefix no other test uses."""
    return f"cascade-test-{uuid.uuid4().hex[:12]}"


def fresh_keys() -> RedisKeys:
    """Key names under a prefix no other test uses."""
    return RedisKeys(fresh_prefix())


def delete_prefix(keys: RedisKeys | str) -> None:
    """Remove every key under a test's prefix (``keys.prefix`` or the prefix itself), as a Redis that
    lost this deployment's data."""
    prefix = keys if isinstance(keys, str) else keys.prefix
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=5, socket_connect_timeout=5)
    try:
        doomed = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if doomed:
            client.delete(*doomed)
    finally:
        client.close()


class RedisLink:
    """A TCP forwarder 127.0.0.1:<port> -> 127.0.0.1:6379 that can be cut and restored."""

    def __init__(self) -> None:
        self.port: int | None = None
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def up(self) -> None:
        """Start (or restart, on the same port) forwarding."""
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port or 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def down(self) -> None:
        """Stop accepting and drop every open connection, as a dead Redis would."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        if server is not None:
            await server.wait_closed()

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", 6379)
        except OSError:
            client_writer.transport.abort()
            return
        self._writers |= {client_writer, upstream_writer}

        async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            writer.transport.abort()

        await asyncio.gather(pump(client_reader, upstream_writer), pump(upstream_reader, client_writer))
        self._writers -= {client_writer, upstream_writer}


class ThreadedRedisLink:
    """A RedisLink on its own event loop thread, for sync tests whose gateway runs in another thread."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._link = RedisLink()

    @property
    def url(self) -> str:
        return self._link.url

    def up(self) -> None:
        asyncio.run_coroutine_threadsafe(self._link.up(), self._loop).result(5)

    def down(self) -> None:
        asyncio.run_coroutine_threadsafe(self._link.down(), self._loop).result(5)

    def close(self) -> None:
        self.down()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
