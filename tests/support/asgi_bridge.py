"""An ASGI app served in-process: its lifespan and requests on an event loop in a thread, reached
through httpx transports instead of a socket.

``AppLoop`` runs the app's lifespan (startup, shutdown) on a uvloop in a background thread, as
uvicorn does, without a listening socket or uvicorn's 0.1 s shutdown tick. ``AppTransport`` (sync)
and ``AsyncAppTransport`` (for a client on any other loop) send each request to that loop and hand
back its response as the app sends it: headers as soon as ``http.response.start`` arrives, body
chunks one by one, so a streamed answer is read while the app still writes it. Closing a response
before its end is the client going away: the app's ``receive()`` answers ``http.disconnect``, as
uvicorn's does. An app that fails before its response starts is a 500; after it started, the body
breaks off (``httpx.RemoteProtocolError``), as a dropped connection would.

``transports(httpx2)`` gives the same two for the anthropic SDK's httpx2 clients.
Starlette's TestClient and httpx's ASGITransport are the models; both wait for the whole response
before returning it, which a streamed, cancelled or stalled answer cannot.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from types import ModuleType
from typing import Any, Generic, TypeVar
from urllib.parse import unquote

import httpx
import uvloop

# What the bridge passes from the app's loop to the client: ("start", status, headers),
# ("body", bytes), ("end",) or ("error", exception).
Event = tuple[Any, ...]
Q = TypeVar("Q", queue.Queue[Event], asyncio.Queue[Event])  # a body's events: sync or async
_NO_RESPONSE = (500, [(b"content-type", b"text/plain; charset=utf-8")], b"Internal Server Error")


class AppLoop:
    """An ASGI app with its lifespan running on a uvloop in a daemon thread."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.loop = uvloop.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="in-process-app", daemon=True)
        self._lifespan: asyncio.Queue[dict[str, Any]] | None = None
        self._lifespan_task: asyncio.Task[None] | None = None
        self._lifespan_said: asyncio.Queue[dict[str, Any]] | None = None

    def start(self) -> None:
        """Start the loop and run the lifespan's startup; RuntimeError if it failed."""
        self.thread.start()
        said = self.call(self._lifespan_event("lifespan.startup"))
        if said["type"] != "lifespan.startup.complete":
            self.call(self._end_loop())
            raise RuntimeError(f"the app did not start: {said.get('message', '')}")

    def stop(self) -> None:
        """Run the lifespan's shutdown, then stop the loop and join its thread."""
        if not self.thread.is_alive():
            return
        try:
            self.call(self._lifespan_event("lifespan.shutdown"))
        finally:
            self.call(self._end_loop())
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(15)
            self.loop.close()

    def call(self, coroutine: Any, timeout_s: float = 30) -> Any:
        """Run ``coroutine`` on the app's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)

    def submit(self, coroutine: Any) -> concurrent.futures.Future[Any]:
        """Schedule ``coroutine`` on the app's loop."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    async def _lifespan_event(self, kind: str) -> dict[str, Any]:
        """Send one lifespan event to the app and return its answer."""
        if self._lifespan is None:
            self._lifespan, self._lifespan_said = asyncio.Queue(), asyncio.Queue()
            scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
            self._lifespan_task = asyncio.create_task(
                self.app(scope, self._lifespan.get, self._lifespan_said.put)
            )
        assert self._lifespan_said is not None and self._lifespan_task is not None
        await self._lifespan.put({"type": kind})
        answer = asyncio.create_task(self._lifespan_said.get())
        await asyncio.wait([answer, self._lifespan_task], return_when=asyncio.FIRST_COMPLETED)
        if answer.done():
            return answer.result()
        answer.cancel()
        failure = self._lifespan_task.exception()
        return {"type": f"{kind}.failed", "message": repr(failure)}

    async def _end_loop(self) -> None:
        """Cancel whatever still runs on the loop (a failed startup leaves tasks behind)."""
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def http_scope(request: Any, server: tuple[str, int]) -> dict[str, Any]:
    """The ASGI scope uvicorn would give ``request`` (spec 2.3, a loopback client)."""
    url = request.url
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": url.scheme,
        "path": unquote(url.path),
        "raw_path": url.raw_path.split(b"?")[0],
        "query_string": url.query,
        "root_path": "",
        "headers": [(k.lower(), v) for k, v in request.headers.raw],
        "client": ("127.0.0.1", 40000),
        "server": server,
        "state": {},
    }


class Exchange:
    """One request served on the app's loop; what the app sends goes to ``deliver`` (thread-safe)."""

    def __init__(self, scope: dict[str, Any], body: bytes, deliver: Callable[[Event], None]) -> None:
        self.scope = scope
        self.body = body
        self.deliver = deliver
        self.gone: asyncio.Event | None = None  # set when the client went away or the answer ended
        self.started = self.ended = False

    async def run(self, app: Any) -> None:
        """Serve the request; whatever happens, the client hears of the end."""
        self.gone = asyncio.Event()
        try:
            await app(self.scope, self._receive, self._send)
        except Exception as exc:  # what uvicorn does: a 500, or a broken-off body
            self._fail(exc)
        else:
            self._fail(RuntimeError("the app returned before its response ended"))
        finally:
            self.gone.set()

    def client_gone(self) -> None:
        """The client closed the response before its end (called on the app's loop)."""
        if self.gone is not None:
            self.gone.set()

    async def _receive(self) -> dict[str, Any]:
        if self.body is not None:
            body, self.body = self.body, None  # type: ignore[assignment]
            return {"type": "http.request", "body": body, "more_body": False}
        assert self.gone is not None
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict[str, Any]) -> None:
        assert self.gone is not None
        if self.ended or (self.gone.is_set() and self.started):
            return  # the client is gone: uvicorn drops what is sent after
        if message["type"] == "http.response.start":
            self.started = True
            self.deliver(("start", message["status"], list(message.get("headers", []))))
        elif message["type"] == "http.response.body":
            if message.get("body"):
                self.deliver(("body", bytes(message["body"])))
            if not message.get("more_body", False):
                self.ended = True
                self.deliver(("end",))
                self.gone.set()

    def _fail(self, exc: BaseException) -> None:
        if self.ended:
            return
        self.ended = True
        if not self.started:
            status, headers, body = _NO_RESPONSE
            self.deliver(("start", status, headers))
            self.deliver(("body", body))
            self.deliver(("end",))
        else:
            self.deliver(("error", exc))


def _read_timeout(request: Any) -> float | None:
    return (request.extensions.get("timeout") or {}).get("read")


class _Body(Generic[Q]):
    """A response body read from the exchange's events ``Q`` (sync or async)."""

    x: ModuleType  # the httpx-compatible package

    def __init__(self, events: Q, request: Any, close: Callable[[], None]):
        self._events, self._request, self._close = events, request, close
        self._done = False

    def _chunk(self, event: Event) -> bytes | None:
        """The body chunk ``event`` carries; None once the body ended (raised if the app broke off)."""
        if event[0] == "body":
            return event[1]
        self._done = True
        if event[0] == "error":
            raise _broken(self.x, event, self._request)
        return None

    def _release(self) -> None:
        if not self._done:
            self._done = True
            self._close()


class _SyncBody(_Body[queue.Queue[Event]]):
    """The body for a sync client (mixed into the package's SyncByteStream)."""

    def __iter__(self) -> Iterator[bytes]:
        while not self._done:
            try:
                event = self._events.get(timeout=_read_timeout(self._request))
            except queue.Empty:
                raise self.x.ReadTimeout("no body chunk in time", request=self._request) from None
            if (chunk := self._chunk(event)) is not None:
                yield chunk

    def close(self) -> None:
        self._release()


class _AsyncBody(_Body[asyncio.Queue[Event]]):
    """The same for an async client (mixed into the package's AsyncByteStream)."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while not self._done:
            try:
                event = await asyncio.wait_for(self._events.get(), _read_timeout(self._request))
            except TimeoutError:
                raise self.x.ReadTimeout("no body chunk in time", request=self._request) from None
            if (chunk := self._chunk(event)) is not None:
                yield chunk

    async def aclose(self) -> None:
        self._release()


def _broken(x: ModuleType, event: Event, request: Any) -> Exception:
    return x.RemoteProtocolError(f"the app broke off its response ({event[1]!r})", request=request)


class _Transport:
    """A transport that serves every request with the app on ``app_loop``."""

    x: ModuleType
    body: type

    def __init__(self, app_loop: AppLoop, server: tuple[str, int] = ("127.0.0.1", 80)) -> None:
        self.app_loop = app_loop
        self.server = server


class _AppTransport(_Transport):
    """The sync transport."""

    def handle_request(self, request: Any) -> Any:
        """Start the request on the app's loop; return once its response headers arrived."""
        events: queue.Queue[Event] = queue.Queue()
        exchange = Exchange(http_scope(request, self.server), request.read(), events.put)
        self.app_loop.submit(exchange.run(self.app_loop.app))
        try:
            event = events.get(timeout=_read_timeout(request))
        except queue.Empty:
            raise self.x.ReadTimeout("no response in time", request=request) from None
        close = lambda: self.app_loop.loop.call_soon_threadsafe(exchange.client_gone)  # noqa: E731
        return self.x.Response(event[1], headers=event[2], stream=self.body(events, request, close))


class _AsyncAppTransport(_Transport):
    """The async transport, for a client on its own loop."""

    async def handle_async_request(self, request: Any) -> Any:
        """Start the request on the app's loop; return once its response headers arrived."""
        here = asyncio.get_running_loop()
        events: asyncio.Queue[Event] = asyncio.Queue()
        body = await request.aread()
        deliver = lambda e: here.call_soon_threadsafe(events.put_nowait, e)  # noqa: E731
        exchange = Exchange(http_scope(request, self.server), body, deliver)
        self.app_loop.submit(exchange.run(self.app_loop.app))
        try:
            event = await asyncio.wait_for(events.get(), _read_timeout(request))
        except TimeoutError:
            raise self.x.ReadTimeout("no response in time", request=request) from None
        close = lambda: self.app_loop.loop.call_soon_threadsafe(exchange.client_gone)  # noqa: E731
        return self.x.Response(event[1], headers=event[2], stream=self.body(events, request, close))


@functools.cache
def transports(x: ModuleType) -> tuple[type, type]:
    """(sync, async) transport classes for the httpx-compatible package ``x``: ``httpx`` itself, or
    ``httpx2`` (the anthropic SDK's), whose clients take only their own package's streams."""
    sync_body = type("SyncBody", (_SyncBody, x.SyncByteStream), {"x": x})
    async_body = type("AsyncBody", (_AsyncBody, x.AsyncByteStream), {"x": x})
    sync = type("AppTransport", (_AppTransport, x.BaseTransport), {"x": x, "body": sync_body})
    async_ = type(
        "AsyncAppTransport", (_AsyncAppTransport, x.AsyncBaseTransport), {"x": x, "body": async_body}
    )
    return sync, async_


AppTransport, AsyncAppTransport = transports(httpx)
