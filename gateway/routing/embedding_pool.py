"""The bounded process pool that computes ``minilm-v1`` router features (``embed_text``).

MiniLM costs tens of milliseconds of CPU per request, so it runs in worker processes (real
parallelism; the event loop never waits on it): at most ``max_pending`` embeddings in flight, each
waited for at most ``timeout_s``. ``gateway.routing.routed_tiers`` serves the tier's cascade when the
pool cannot give an embedding, and names why: ``saturated``, ``timeout``, ``warming`` or ``error``.

The pool heals. ``start`` (at boot, when the policy has a ``minilm-v1`` router) spawns the workers
and warms them (each loads the model) in the background; until they are warm a request is not
queued behind the load but answered ``warming`` at once, and ``booting`` holds the replica's
readiness. A policy with such a router that arrives later starts the pool on its first embedding,
warmed the same way without holding readiness. A worker that dies (an OOM kill, a crash) breaks a
``ProcessPoolExecutor`` for good: the broken pool is seen on the next submit or by the embedding
it failed, and replaced by a new one, warmed the same way. Restarts are rate-bounded so a worker
that dies on every request does not spin: the first is immediate, then each waits
``restart_backoff_s`` doubled per restart without a successful embedding in between (at most
``max_backoff_s``); while a restart waits, requests fall back with ``error``. Each restart is
counted (``restarts``, a Counter) and logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import BrokenExecutor, Future, ProcessPoolExecutor
from typing import Any

import numpy as np
from prometheus_client import Counter

from gateway.wire.logs import log_event

OFF, WARMING, READY, DOWN = "off", "warming", "ready", "down"


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
    """At most ``max_pending`` embeddings in flight on ``workers`` processes, healed when a worker
    dies (module docstring); ``embed`` gives None and why when it cannot."""

    def __init__(
        self,
        workers: int = 1,
        max_pending: int = 4,
        timeout_s: float = 0.25,
        *,
        restarts: Counter | None = None,
        initializer: Callable[[], object] = _warm_worker,
        warm_timeout_s: float = 120.0,
        restart_backoff_s: float = 1.0,
        max_backoff_s: float = 60.0,
    ):
        self.workers = workers
        self.max_pending = max_pending
        self.timeout_s = timeout_s
        self.warm_timeout_s = warm_timeout_s
        self.initializer = initializer  # runs in each worker before it takes work: loads the model
        self.restart_backoff_s = restart_backoff_s
        self.max_backoff_s = max_backoff_s
        self.pending = 0
        self.state = OFF
        self.booting = False  # the first warm-up since start() runs: readiness waits for it
        self.worker_pids: list[int] = []  # of the warm workers
        self.restart_count = 0
        self._restarts = restarts  # prometheus Counter of restarts, when exported
        self._executor: ProcessPoolExecutor | None = None
        self._warming: asyncio.Task[None] | None = None
        self._backoff_s = restart_backoff_s
        self._next_restart_at = 0.0
        self._closed = False  # closed: never started again (an embedding at shutdown is an error)

    def start(self) -> None:
        """Spawn the workers and warm them in the background (on the running loop); readiness
        (``booting``) waits for the warm-up. Nothing when already started."""
        if self.state != OFF or self._closed:
            return
        self.booting = True
        self._spawn()

    def _spawn(self) -> None:
        import multiprocessing

        # spawn: a fork of a process running an event loop and threads is not safe.
        self._executor = ProcessPoolExecutor(
            self.workers, mp_context=multiprocessing.get_context("spawn"), initializer=self.initializer
        )
        # The executor spawns a worker per submit while none is idle: one job each warms them all.
        warm = [self._executor.submit(os.getpid) for _ in range(self.workers)]
        self.state = WARMING
        self.worker_pids = []
        log_event("embedding_pool_warming", workers=self.workers, restarts=self.restart_count)
        self._warming = asyncio.get_running_loop().create_task(
            self._warm(self._executor, warm), name="embedding-pool-warm"
        )

    async def _warm(self, executor: ProcessPoolExecutor, warm: list[Future[int]]) -> None:
        started = time.monotonic()
        try:
            pids = await asyncio.wait_for(
                asyncio.gather(*(asyncio.wrap_future(f) for f in warm)), self.warm_timeout_s
            )
        except Exception as exc:  # died while loading, or the load hangs: restarted by the rate rule
            self._broke(executor, f"warm-up failed: {type(exc).__name__}: {exc}")
            return
        finally:
            self.booting = False
        if executor is self._executor:
            self.state = READY
            self.worker_pids = sorted(set(pids))
            log_event(
                "embedding_pool_warm", seconds=round(time.monotonic() - started, 3), pids=self.worker_pids
            )

    def _broke(self, executor: ProcessPoolExecutor, cause: str) -> None:
        """``executor`` lost a worker (or never warmed): when it is still the pool's, the pool is
        down until ``_restart`` replaces it (its other embeddings, failing too, change nothing)."""
        if executor is not self._executor or self.state == DOWN:
            return
        self.state = DOWN
        self.worker_pids = []
        wait_s = max(0.0, self._next_restart_at - time.monotonic())
        log_event("embedding_pool_broken", level=logging.WARNING, cause=cause, restart_in_s=round(wait_s, 3))

    def _restart_if_due(self) -> str:
        """The fallback reason while not ready: restarts a down pool when the rate rule allows."""
        if self.state == OFF and not self._closed:
            # A policy with a minilm-v1 router arrived after boot: warmed the same way, but the
            # replica, serving already, stays ready (every replica gets a pushed policy at once).
            self._spawn()
        elif self.state == DOWN and time.monotonic() >= self._next_restart_at:
            self._restart()
        return "warming" if self.state == WARMING else "error"

    def _restart(self) -> None:
        self._shutdown()
        self.restart_count += 1
        if self._restarts is not None:
            self._restarts.inc()
        self._next_restart_at = time.monotonic() + self._backoff_s
        self._backoff_s = min(self._backoff_s * 2, self.max_backoff_s)
        log_event("embedding_pool_restarting", level=logging.WARNING, restarts=self.restart_count)
        self._spawn()

    async def embed(self, text: str) -> tuple[np.ndarray | None, str]:
        """``(embedding, "ok")``, or ``(None, why)`` with why ``saturated``, ``warming`` (the workers
        are loading the model), ``timeout`` or ``error`` (the embedding failed, or the pool is down
        waiting for its restart)."""
        if self.pending >= self.max_pending:
            return None, "saturated"
        if self.state != READY:
            return None, self._restart_if_due()
        executor = self._executor
        assert executor is not None
        try:
            future = executor.submit(embed_text, text)
        except BrokenExecutor:  # a worker died while the pool was idle
            self._broke(executor, "a worker died")
            return None, self._restart_if_due()
        except RuntimeError:  # the pool is shut down
            return None, "error"
        self.pending += 1
        loop = asyncio.get_running_loop()
        future.add_done_callback(lambda _: _on_loop(loop, self._release))
        try:
            embedding = await asyncio.wait_for(asyncio.wrap_future(future), self.timeout_s)
        except TimeoutError:
            return None, "timeout"
        except BrokenExecutor:  # its worker died under this embedding
            self._broke(executor, "a worker died during an embedding")
            self._restart_if_due()
            return None, "error"
        except Exception:
            return None, "error"
        self._backoff_s = self.restart_backoff_s  # healthy again: the next restart is immediate
        return embedding, "ok"

    async def wait_warm(self) -> bool:
        """Wait for the warm-up under way, if any, to end; whether the pool takes embeddings now."""
        if self._warming is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self._warming)
        return self.state == READY

    def _release(self) -> None:
        self.pending -= 1

    def status(self) -> dict[str, Any]:
        """The pool as /readyz's admin view shows it: state, restarts, worker pids."""
        return {"state": self.state, "restarts": self.restart_count, "workers": self.worker_pids}

    def _shutdown(self) -> None:
        if self._warming is not None:
            self._warming.cancel()
            self._warming = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def close(self) -> None:
        """Stop the worker processes (pending embeddings are abandoned)."""
        self._shutdown()
        self.state = OFF
        self.booting = False
        self._closed = True


def _on_loop(loop: asyncio.AbstractEventLoop, callback: Any) -> None:
    """Run ``callback`` on ``loop`` (the pool's callbacks run on its own thread); nothing once it closed."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback)
