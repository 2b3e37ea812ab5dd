"""A loopback proxy in front of a real OpenAI-compatible server that can cut its streams (the seam
of a network fault in front of a real model).

``CuttingProxy(target, cut_after)`` forwards every ``POST /v1/...`` to ``target`` (a base URL such as
``http://127.0.0.1:PORT``) and relays the answer. A streamed answer is relayed event by event and,
with ``cut_after`` set, its connection is closed after that many ``data:`` events (no ``[DONE]``):
a stream cut mid-answer, the server's own chunks up to the cut. Each request is recorded
(``requests``: the parsed bodies) with the content text relayed for it (``texts``), so a test can
say which words came from which server. ``running_proxy(...)`` starts one for a block.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
import orjson
from aiohttp import web


class CuttingProxy:
    """Relays requests to ``target``; cuts streamed answers after ``cut_after`` events (module docstring)."""

    def __init__(self, target: str, cut_after: int | None = None):
        self.target = target.rstrip("/")
        self.cut_after = cut_after
        self.requests: list[dict[str, Any]] = []
        self.texts: list[str] = []  # per request: the content text relayed to the client
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """The proxy's OpenAI base URL."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        """Serve on a free loopback port in a thread of its own; returns once listening."""
        ready = threading.Event()

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            app = web.Application()
            app.router.add_post("/v1/{path:.*}", self._relay)
            runner = web.AppRunner(app, access_log=None)
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="cutting-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("cutting proxy did not start")

    def stop(self) -> None:
        """Stop the proxy and its thread."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = orjson.loads(raw)
        self.requests.append(body)
        self.texts.append("")
        index = len(self.texts) - 1
        url = f"{self.target}/v1/{request.match_info['path']}"
        async with (
            aiohttp.ClientSession() as session,
            session.post(url, data=raw, headers={"content-type": "application/json"}) as upstream,
        ):
            response = web.StreamResponse(status=upstream.status)
            response.content_type = upstream.content_type
            await response.prepare(request)
            events = 0
            async for line in upstream.content:
                if line.startswith(b"data: {"):
                    self.texts[index] += _content(line[6:])
                    events += 1
                await response.write(line)
                if self.cut_after is not None and events >= self.cut_after and line.strip() == b"":
                    request.transport.close()  # type: ignore[union-attr]  # cut: no [DONE]
                    return response
            await response.write_eof()
        return response


def _content(data: bytes) -> str:
    """The content text of one chat chunk."""
    event = orjson.loads(data)
    pieces = [c.get("delta", {}).get("content") for c in event.get("choices") or ()]
    return "".join(p for p in pieces if isinstance(p, str))


@contextmanager
def running_proxy(target: str, cut_after: int | None = None) -> Iterator[CuttingProxy]:
    """A started ``CuttingProxy`` for the block, stopped afterwards."""
    proxy = CuttingProxy(target, cut_after)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
