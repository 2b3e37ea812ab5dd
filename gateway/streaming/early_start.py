"""Early stream start: a streamed response whose first event is late starts anyway and is kept alive.

A cascade decides before it streams: the cheap stage's whole answer is read and scored before the
first byte of a streamed response (gateway.engine.cascade). On a slow upstream that can take minutes (an
agent CLI's 11k-token prompt read on two CPU cores), while clients give up waiting for the
response *headers* long before the stream's own timeouts apply (Claude Code after 360 s). So when a
streamed request's response has not started within ``limits.stream_start_after_s``, ``EarlyStart``
sends the 200 status with the headers already known (the SSE headers, ``x-request-id``, a key's
``x-ratelimit-*``), then the API's own keep-alive every ``limits.stream_keepalive_s`` until the
first real event: an ``event: ping`` (``{"type": "ping"}``) on ``/v1/messages``, an SSE comment
(``: keep-alive``) on chat completions, completions and Responses, which every SSE client skips.

After an early start the decision (``x-cascade-*``) can no longer be HTTP headers: it is written as
SSE comment lines (``: x-cascade-model: small``) just before the first event
(``decision_comment``), and in the log line and the final chunk's ``cascade`` object as always.
Every later failure is the API's SSE error event (the endpoint sees ``exchange.started``). The
keep-alive runs in its own task, so the request's task (the engine, its deadline, its
cancellation) runs exactly as without it; nothing here touches what is called or charged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from gateway.wire.exchange import Headers


class EarlyStart:
    """Starts a streamed response that has not started ``after_s`` seconds after creation, and keeps
    it alive until ``stop``; ``close`` ends it however the request ends.

    ``start(status, headers)`` and ``body(data)`` are the exchange's sends; ``headers()`` gives the
    headers known before the decision. Costs one timer per streamed request until it fires.
    """

    __slots__ = (
        "_body",
        "_every_s",
        "_headers",
        "_keepalive",
        "_start",
        "_stopping",
        "_task",
        "_timer",
        "early",
    )

    def __init__(
        self,
        start: Callable[[int, Headers], Awaitable[None]],
        body: Callable[[bytes], Awaitable[None]],
        headers: Callable[[], Headers],
        keepalive: bytes,
        after_s: float,
        every_s: float,
    ):
        self._start, self._body, self._headers = start, body, headers
        self._keepalive, self._every_s = keepalive, every_s
        self._task: asyncio.Task[None] | None = None
        self._stopping: asyncio.Event | None = None
        self.early = False  # the response was started here (the decision goes into the body)
        self._timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(after_s, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._stopping = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._keep_alive(self._stopping))

    async def _keep_alive(self, stopping: asyncio.Event) -> None:
        self.early = True
        await self._start(200, self._headers())
        while not stopping.is_set():
            await self._body(self._keepalive)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self._every_s)

    async def stop(self) -> bool:
        """Before the response's first real bytes: end the timer or the keep-alive (a send in
        progress completes first); whether the response was started early."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task = self._task
        if task is not None:
            assert self._stopping is not None
            self._stopping.set()
            self._task = None
            await task
        return self.early

    def close(self) -> None:
        """However the request ends (an error, a cancellation): no keep-alive is sent after this."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:
            self._task.cancel()
            self._task = None


def decision_comment(headers: Headers) -> bytes:
    """The ``x-cascade-*`` decision headers of a stream started early, as SSE comment lines."""
    lines = [b": " + name + b": " + value for name, value in headers if name.startswith(b"x-cascade-")]
    return b"\n".join(lines) + b"\n\n" if lines else b""
