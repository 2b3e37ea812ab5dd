"""Batched writes of traffic rows to the store, which may be down or slow without anyone waiting.

Workers hand over each sample's rows (``submit``, never blocking); one writer task writes them in
batches of ``batch_rows`` or every ``flush_interval_s``, each write bounded by ``store_timeout_s``.
A write that fails or times out drops its batch (its samples are counted as dropped, reason
``store_error``) and marks the store down for ``store_retry_s``: meanwhile ``accepting()`` is false,
so workers drop new samples before buying their shadow calls. After the pause the next samples go
through again; the first write that succeeds marks the store up. No restart is ever needed.

A write that outlasts its bound is cancelled but not waited for (a frozen connection can hold a
cancelled driver call for long); until it has ended, batches are dropped without a new write, so
a hung store never piles up writes. A timed-out write to the file store runs on in its worker
thread and may still land; the store skips a (query_id, model) it already holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from gateway.wire.logs import log_event, log_exception
from traffic.rows import TrafficRow
from traffic.store import StoreError, TrafficStore

# Rows waiting beyond this many batches mean the store cannot keep up: new samples are dropped.
_MAX_PENDING_BATCHES = 10


class RowWriter:
    """Buffers rows and writes them to ``store`` in batches (see the module docstring)."""

    def __init__(
        self,
        store: TrafficStore,
        *,
        batch_rows: int,
        flush_interval_s: float,
        timeout_s: float,
        retry_s: float,
        on_dropped: Callable[[str, int], None],
        on_written: Callable[[int], None],
        on_store_up: Callable[[bool], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``on_dropped(reason, samples)``, ``on_written(rows)``, ``on_store_up(up)`` report to metrics."""
        self.store = store
        self.batch_rows = batch_rows
        self.flush_interval_s = flush_interval_s
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self._on_dropped = on_dropped
        self._on_written = on_written
        self._on_store_up = on_store_up
        self._clock = clock
        self._rows: list[TrafficRow] = []
        self._samples = 0
        self._down_until = 0.0
        self._up: bool | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stuck: asyncio.Task[int] | None = None  # a timed-out write that has not ended yet
        self._lock = asyncio.Lock()  # one write at a time: batches land in order

    def accepting(self) -> bool:
        """False while the store is marked down (after a failed write, for ``retry_s``)."""
        return self._clock() >= self._down_until

    def submit(self, rows: Sequence[TrafficRow]) -> bool:
        """Queue one sample's rows for the next batch; False (the caller drops the sample) when the
        store is down or too far behind."""
        if not self.accepting() or len(self._rows) >= self.batch_rows * _MAX_PENDING_BATCHES:
            return False
        self._rows.extend(rows)
        self._samples += 1
        if len(self._rows) >= self.batch_rows:
            self._wake.set()
        return True

    def start(self) -> None:
        """Start the writer task (in the serving loop)."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="learning-writer")

    async def close(self, timeout_s: float) -> None:
        """Stop the task and write what is buffered, for at most ``timeout_s`` (else it is dropped)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self.flush(min(timeout_s, self.timeout_s), reason_if_late="shutdown")

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.flush_interval_s)
            self._wake.clear()
            await self.flush(self.timeout_s)

    async def flush(self, timeout_s: float, reason_if_late: str = "store_error") -> None:
        """Write the buffered rows as one batch; on failure count their samples as dropped."""
        async with self._lock:
            rows, samples = self._rows, self._samples
            self._rows, self._samples = [], 0
            if not rows:
                return
            if self._stuck is not None and not self._stuck.done():
                self._failed(samples, "an earlier write has not ended", reason_if_late)
                return
            write = asyncio.get_running_loop().create_task(self.store.write_rows(rows))
            write.add_done_callback(_consume)
            try:
                done, _ = await asyncio.wait({write}, timeout=timeout_s)
                if not done:
                    write.cancel()
                    self._stuck = write
                    self._failed(samples, f"no answer within {timeout_s:g}s", reason_if_late)
                    return
                written = write.result()
            except asyncio.CancelledError:  # the sampler is closing mid-write: the batch is given up
                write.cancel()
                self._on_dropped("shutdown", samples)
                raise
            except StoreError as exc:
                self._failed(samples, str(exc), "store_error")
            except Exception as exc:
                log_exception("learning_store_write_failed")
                self._failed(samples, type(exc).__name__, "store_error")
            else:
                self._on_written(written)
                self._mark(True, None)

    def _failed(self, samples: int, reason: str, counted_as: str) -> None:
        self._on_dropped(counted_as, samples)
        self._down_until = self._clock() + self.retry_s
        self._mark(False, reason)

    def _mark(self, up: bool, reason: str | None) -> None:
        self._on_store_up(up)
        if up == self._up:
            return
        if up:
            if self._up is not None:
                log_event("learning_store_up", store=repr(self.store))
        else:
            log_event(
                "learning_store_down",
                level=logging.WARNING,
                store=repr(self.store),
                reason=reason,
                retry_s=self.retry_s,
            )
        self._up = up


def _consume(task: asyncio.Task[int]) -> None:
    """Retrieve an abandoned write's outcome (so asyncio never reports it as unhandled)."""
    if not task.cancelled():
        task.exception()
