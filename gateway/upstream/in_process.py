"""Upstream calls answered by an aiohttp application in this process, through memory pipes.

``InProcessUpstreams`` is a ``SessionOpener`` (gateway.upstream.transport): the sessions it opens
reach the applications it was given, by address, over a pair of in-memory transports instead of a
socket; a request to any other address goes out over TCP as usual (so a model pointed at a closed
port still fails to connect). Both ends stay aiohttp's own: the client's request writer, response
parser, read timeouts and pool, and the server's request handler. So an answer streamed in chunks,
a body cut by closing the transport, a stall mid-body and a client closing its response mid-stream
(which cancels the handler) behave as they do over loopback, without the kernel or a second thread.
The application runs on the loop of the session that reached it (one runner per loop).
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from gateway.config.settings import ModelConfig
from gateway.upstream.transport import session_over

AppFactory = Callable[[], web.Application]
"""Builds a fresh application (an aiohttp application belongs to one loop)."""


class MemoryTransport(asyncio.Transport):
    """One end of an in-memory connection: what it writes is delivered to the other end's protocol
    on a later loop iteration, in order; closing it delivers what was written, then ends both sides."""

    def __init__(self, loop: asyncio.AbstractEventLoop, protocol: asyncio.BaseProtocol, address: Any):
        super().__init__()
        self._loop = loop
        self._protocol = protocol
        self._address = address
        self._peer: MemoryTransport | None = None
        self._inbox: deque[bytes] = deque()  # written by the peer, not yet delivered
        self._reading = True
        self._closing = False
        self._eof = False  # the peer closed: end once the inbox is delivered
        self._lost = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Queue ``data`` for the peer (dropped once either side closed, as a socket would)."""
        peer = self._peer
        if self._closing or peer is None or peer._lost or not data:
            return
        peer._inbox.append(bytes(data))
        self._loop.call_soon(peer._deliver)

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Close after what was written reached the peer (the peer then sees its connection lost)."""
        if self._closing:
            return
        self._closing = True
        if self._peer is not None and not self._peer._lost:
            self._peer._eof = True
            self._loop.call_soon(self._peer._deliver)
        self._loop.call_soon(self._end)

    def abort(self) -> None:
        """Close now, dropping what the peer has not read yet."""
        if self._peer is not None:
            self._peer._inbox.clear()
        self.close()

    def pause_reading(self) -> None:
        self._reading = False

    def resume_reading(self) -> None:
        if not self._reading:
            self._reading = True
            self._loop.call_soon(self._deliver)

    def is_reading(self) -> bool:
        return self._reading and not self._closing

    def get_write_buffer_size(self) -> int:
        return 0  # delivered without a kernel buffer in between

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def can_write_eof(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name in ("peername", "sockname"):
            return self._address
        return default

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def _deliver(self) -> None:
        """Hand the inbox to this end's protocol while it reads; then end if the peer closed."""
        protocol = self._protocol
        assert isinstance(protocol, asyncio.Protocol)
        while self._inbox and self._reading and not self._lost:
            protocol.data_received(self._inbox.popleft())
        if self._eof and not self._inbox:
            # A turn later, as a socket's end is a read of its own after the data's: whoever the
            # data woke up reads it before it hears of the end.
            self._loop.call_soon(self._end)

    def _end(self) -> None:
        if self._lost:
            return
        self._lost = self._closing = True
        self._inbox.clear()
        self._protocol.connection_lost(None)


def connect_in_memory(
    loop: asyncio.AbstractEventLoop, client: asyncio.Protocol, server: asyncio.Protocol, address: Any
) -> None:
    """Connect two protocols through a pair of memory transports (both see ``connection_made``)."""
    client_end = MemoryTransport(loop, client, address)
    server_end = MemoryTransport(loop, server, address)
    client_end._peer, server_end._peer = server_end, client_end
    server.connection_made(server_end)
    client.connection_made(client_end)


class InProcessConnector(aiohttp.TCPConnector):
    """A TCP connector that reaches some addresses in memory: ``servers`` maps (host, port) to the
    protocol factory of the server answering there; every other address is dialled over TCP."""

    def __init__(self, servers: Mapping[tuple[str, int], Callable[[], asyncio.Protocol]], **kwargs: Any):
        super().__init__(**kwargs)
        self._servers = servers

    async def _create_connection(self, req: Any, traces: Any, timeout: aiohttp.ClientTimeout) -> Any:
        # aiohttp's extension point for a connector's own connections (its unix/pipe connectors).
        server = self._servers.get((req.host, req.port))
        if server is None:
            return await super()._create_connection(req, traces, timeout)
        client = self._factory()
        connect_in_memory(self._loop, client, server(), (req.host, req.port))
        return client


class InProcessUpstreams:
    """A ``SessionOpener`` whose sessions reach the given applications in memory.

    ``apps`` maps a base URL (only its host and port count) to a factory of the aiohttp application
    that answers there. The applications run with handler cancellation on, as a served runner does.
    """

    def __init__(self, apps: Mapping[str, AppFactory]):
        self._apps = {_address(url): factory for url, factory in apps.items()}
        self._runners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[web.AppRunner]] = (
            weakref.WeakKeyDictionary()
        )

    async def __call__(self, config: ModelConfig) -> aiohttp.ClientSession:
        """A session (keep-alive, as the pooled one) whose connections to the apps stay in memory."""
        servers = await self._servers(asyncio.get_running_loop())
        return session_over(InProcessConnector(servers, limit=512, keepalive_timeout=60))

    async def _servers(
        self, loop: asyncio.AbstractEventLoop
    ) -> dict[tuple[str, int], Callable[[], asyncio.Protocol]]:
        """The request handler factories for this loop (set up once per loop)."""
        runners = self._runners.get(loop)
        if runners is None:
            runners = []
            for factory in self._apps.values():
                runner = web.AppRunner(factory(), handler_cancellation=True, access_log=None)
                await runner.setup()
                runners.append(runner)
            self._runners[loop] = runners
        servers: dict[tuple[str, int], Callable[[], asyncio.Protocol]] = {}
        for address, runner in zip(self._apps, runners, strict=True):
            assert runner.server is not None
            servers[address] = runner.server
        return servers


def _address(base_url: str) -> tuple[str, int]:
    url = URL(base_url)
    assert url.host is not None and url.port is not None, base_url
    return url.host, url.port
