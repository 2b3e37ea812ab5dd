"""Helpers of the learning tests: store URLs, metric reads, and a TCP proxy.

* ``postgres_store_url(schema, port)``: a store URL on the test PostgreSQL (tests/support/postgres.py),
  or on a proxy's port.
* ``registry_value(gateway, name, **labels)``: a sample of an app's registry, read in process
  (also after the server stopped), parsed with prometheus_client's text parser.
* ``TcpProxy``: forwards a loopback port to another (the seam between the gateway and PostgreSQL):
  ``close()`` stops listening and cuts live connections (the store is down), ``open()`` listens
  again on the same port (it is back), ``freeze()``/``thaw()`` hold and release the bytes (a slow
  store).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.support.ports import free_port


def postgres_store_url(schema: str, port: int = 5432, connect_timeout_s: float = 2.0) -> str:
    """A traffic store URL on the test database (through ``port``) in ``schema``."""
    return f"postgresql://postgres@127.0.0.1:{port}/test?schema={schema}&connect_timeout={connect_timeout_s}"


def registry_value(gateway: Any, name: str, **labels: str) -> float:
    """One sample of ``gateway.metrics``' registry (0.0 when absent); ``name`` is the sample name."""
    text = gateway.metrics.render().decode()
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``127.0.0.1:target_port`` from a thread of its own."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._thread.start()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._flowing = self._call(self._make_event)

    def _call(self, function: Any, *args: Any) -> Any:
        async def run() -> Any:
            result = function(*args)
            return await result if asyncio.iscoroutine(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    @staticmethod
    def _make_event() -> asyncio.Event:
        event = asyncio.Event()
        event.set()
        return event

    def open(self) -> None:
        """Listen (again) on ``port``."""
        self._call(self._open)

    async def _open(self) -> None:
        self._server = await asyncio.start_server(self._connected, "127.0.0.1", self.port)

    def close(self) -> None:
        """Stop listening and cut every live connection: whatever is behind is unreachable."""
        self._call(self._close)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def freeze(self) -> None:
        """Keep connections open but forward nothing (a store that does not answer)."""
        self._call(self._flowing.clear)

    def thaw(self) -> None:
        """Forward again."""
        self._call(self._flowing.set)

    def stop(self) -> None:
        """Close everything and end the thread."""
        self.thaw()
        self.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            target_reader, target_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, target_writer}
        await asyncio.gather(
            self._pipe(reader, target_writer), self._pipe(target_reader, writer), return_exceptions=True
        )
        self._writers -= {writer, target_writer}

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        finally:
            writer.transport.abort()


def learning_block(store: str, **changes: Any) -> dict[str, Any]:
    """A ``learning:`` config section for tests: every request sampled, quick writes and retries."""
    block: dict[str, Any] = {
        "enabled": True,
        "sample_rate": 1.0,
        "judge": {"kind": "exact"},
        "store": store,
        "max_shadow_usd_per_hour": 10.0,
        "flush_interval_s": 0.1,
        "store_timeout_s": 2.0,
        "store_retry_s": 0.3,
    }
    block.update(changes)
    return block
