"""The bounded process pool that computes ``minilm-v1`` router features (``embed_text``).

MiniLM costs tens of milliseconds of CPU per request, so it runs in worker processes (real
parallelism; the event loop never waits on it): at most ``max_pending`` embeddings in flight, each
waited for at most ``timeout_s``. ``gateway.routing.routed_tiers`` serves the tier's cascade when the
pool cannot give an embedding.
"""

from __future__ import annotations

import asyncio
import contextlib
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any

import numpy as np


def embed_text(text: str) -> np.ndarray:
    """The MiniLM embedding of ``text`` (run in a pool process; the encoder loads once per process)."""
    from traffic.judges.similarity import load_encoder

    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # one BLAS thread per worker either way is what the pool size counts on
        return np.asarray(load_encoder().encode(text), dtype=np.float64)
    with threadpool_limits(limits=1):
        return np.asarray(load_encoder().encode(text), dtype=np.float64)


def _warm_worker() -> None:
    embed_text("warm up")


class EmbeddingPool:
    """At most ``max_pending`` embeddings in flight on ``workers`` processes; None when it cannot."""

    def __init__(self, workers: int = 1, max_pending: int = 4, timeout_s: float = 0.25):
        self.workers = workers
        self.max_pending = max_pending
        self.timeout_s = timeout_s
        self.pending = 0
        self._executor: Executor | None = None

    def _pool(self) -> Executor:
        if self._executor is None:
            import multiprocessing

            # spawn: a fork of a process running an event loop and threads is not safe.
            self._executor = ProcessPoolExecutor(
                self.workers, mp_context=multiprocessing.get_context("spawn"), initializer=_warm_worker
            )
        return self._executor

    def start(self) -> None:
        """Start the worker processes now (they load the model before the first request needs it)."""
        self._pool()

    async def embed(self, text: str) -> tuple[np.ndarray | None, str]:
        """``(embedding, "ok")``, or ``(None, why)`` with why ``saturated``, ``timeout`` or ``error``."""
        if self.pending >= self.max_pending:
            return None, "saturated"
        try:
            future = self._pool().submit(embed_text, text)
        except RuntimeError:  # the pool is shut down or broken
            return None, "error"
        self.pending += 1
        loop = asyncio.get_running_loop()
        future.add_done_callback(lambda _: _on_loop(loop, self._release))
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self.timeout_s), "ok"
        except TimeoutError:
            return None, "timeout"
        except Exception:
            return None, "error"

    def _release(self) -> None:
        self.pending -= 1

    def close(self) -> None:
        """Stop the worker processes (pending embeddings are abandoned)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


def _on_loop(loop: asyncio.AbstractEventLoop, callback: Any) -> None:
    """Run ``callback`` on ``loop`` (the pool's callbacks run on its own thread); nothing once it closed."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback)
