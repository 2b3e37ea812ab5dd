"""The sampler: the draw, the bounded queue, the workers and their shutdown.

On the request path the gateway asks ``draw()`` once per request: the sampler decides (cascade
requests only, one random number; an unsampled request does nothing else) and a drawn request's
``DrawnRequest.keep`` is what the engine calls with each scored answer. Once its response has been
sent in full, and only if it succeeded, it is handed over with ``offer()``, which never waits: a
full queue drops the sample (counted). ``learning.concurrency`` workers take samples off the queue, make
their shadow calls and labels (``ShadowRunner``) and submit the rows to the ``RowWriter``.

Faults never reach clients: a store that is down or slow drops samples (counted) and is retried
after ``store_retry_s``; the readiness probe does not look at it. ``close(deadline)`` stops taking
samples, lets the workers finish the queue until ``deadline`` (the end of the shutdown grace), then
cancels what is left (each sample counted as dropped, reason ``shutdown``; a shadow call cut
mid-flight is charged its worst case) and writes the buffered rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gateway.config.learning import LearningConfig
from gateway.config.settings import ModelConfig
from gateway.learning.answers import DrawnRequest, RoutedAs, Sample
from gateway.learning.budget import ShadowBudget
from gateway.learning.shadow import SampleDroppedError, ShadowRunner
from gateway.learning.writer import RowWriter
from gateway.telemetry.metrics import LearningMetrics
from gateway.upstream.pool import UpstreamPool
from gateway.upstream.transport import SessionOpener, open_pooled_session
from gateway.wire.logs import log_event, log_exception
from redaction import Redactor
from traffic.backends import open_store
from traffic.judges import make_judge
from traffic.store import TrafficStore

if TYPE_CHECKING:
    from gateway.routing.tier_choice import RoutePlan
    from gateway.telemetry.metrics import GatewayMetrics
    from gateway.wire.requests import ParsedRequest
    from traffic.judges import Judge

# The final write at shutdown gets at least this long, even when the grace is spent.
_FINAL_WRITE_MIN_S = 1.0
# The ``reason`` labels of cascade_learning_dropped_total (docs/contracts.md#metrics).
DROP_REASONS = ("queue_full", "spend_cap", "store_error", "shutdown", "error")


class TrafficSampler:
    """Samples the gateway's cascade requests into the traffic store (see the module docstring)."""

    def __init__(
        self,
        config: LearningConfig,
        models: Mapping[str, ModelConfig],
        request_timeout_s: float,
        metrics: GatewayMetrics,
        *,
        store: TrafficStore | None = None,
        judge: Judge | None = None,
        rng: random.Random | None = None,
        clock: Any = time.monotonic,
        redact: Redactor | None = None,
        transport: SessionOpener = open_pooled_session,
    ) -> None:
        """Build from the config's ``learning`` section (no I/O: the store connects and sessions
        open later); ``models`` are the configured models and ``request_timeout_s`` bounds each
        sample's shadow calls (the config's ``limits.request_timeout_s``).

        ``store`` and ``judge`` replace the configured ones; ``rng`` and ``clock`` make draws and
        the spend window reproducible in tests; ``redact`` cleans the shadow calls' upstream error
        text (by default of the models' own keys); ``transport`` opens their sessions
        (gateway.upstream.transport).
        """
        assert config.store is not None and metrics.learning is not None
        self.config = config
        self.rate = config.sample_rate
        self._random = (rng or random.Random()).random
        self.metrics: LearningMetrics = metrics.learning
        self.store = store or open_store(config.store)
        self.judge = judge or make_judge(config.judge)
        self.budget = ShadowBudget(config.max_shadow_usd_per_hour, clock=clock)
        self.pool = UpstreamPool(
            models, metrics, redact, transport
        )  # own sessions: never the clients' connections
        self.runner = ShadowRunner(
            config,
            models,
            request_timeout_s,
            self.pool,
            self.metrics,
            self.judge,
            self.budget,
            replica=socket.gethostname(),
        )
        self.writer = RowWriter(
            self.store,
            batch_rows=config.batch_rows,
            flush_interval_s=config.flush_interval_s,
            timeout_s=config.store_timeout_s,
            retry_s=config.store_retry_s,
            on_dropped=self._dropped,
            on_written=self.metrics.rows_written.inc,
            on_store_up=lambda up: self.metrics.store_up.set(1 if up else 0),
            clock=clock,
        )
        self.queue: asyncio.Queue[Sample] = asyncio.Queue(maxsize=config.queue_size)
        self._export_metrics()
        self._accepting = True
        self._workers: list[asyncio.Task[None]] = []

    def _export_metrics(self) -> None:
        """The sampler's gauges read its queue and budget; every drop series exists from the start."""
        self.metrics.queue_depth.set_function(self.queue.qsize)
        self.metrics.shadow_spend_window.set_function(self.budget.spent_usd)
        self.metrics.shadow_spend_cap.set(
            self.config.max_shadow_usd_per_hour
        )  # alerts read the window against it
        self.metrics.store_up.set(1)  # no write has failed yet
        for reason in DROP_REASONS:  # every series from the start, so rate() sees the first drop
            self.metrics.child(self.metrics.dropped, reason)

    # --- request path -----------------------------------------------------------------------------

    def draw(self, plan: RoutePlan, request: ParsedRequest) -> DrawnRequest | None:
        """Whether to sample this request: a cascade request (not a passthrough) and one random draw,
        nothing else. A drawn request keeps the answers the engine scores (``DrawnRequest.keep``)
        and the request's kind (``plan.kind``), which its rows record."""
        if plan.route is None or plan.policy is None or self._random() >= self.rate:
            return None
        routed = None
        if plan.mechanism is not None:  # a routed tier: its rows carry the router's decision
            routed = RoutedAs(
                plan.mechanism, plan.router_probability, plan.router_features, tuple(plan.route.models)
            )
        return DrawnRequest(request, plan.policy, plan.kind, routed=routed)

    def offer(self, query_id: str, drawn: DrawnRequest, tier: str) -> None:
        """Queue an answered, drawn request; a full queue (or a closing sampler) drops it, counted."""
        metrics = self.metrics
        metrics.child(metrics.sampled, tier).inc()
        if not self._accepting:
            self._dropped("shutdown")
            return
        sample = Sample(
            query_id,
            drawn.request,
            drawn.policy,
            tier,
            drawn.answers,
            datetime.now(UTC),
            drawn.kind,
            drawn.routed,
        )
        try:
            self.queue.put_nowait(sample)
        except asyncio.QueueFull:
            self._dropped("queue_full")

    # --- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the shadow sessions and start the workers and the writer (in the serving loop)."""
        await self.pool.start()
        self.writer.start()
        self._workers = [
            asyncio.create_task(self._work(), name=f"learning-worker-{i}")
            for i in range(self.config.concurrency)
        ]
        log_event(
            "learning_started",
            sample_rate=self.rate,
            store=repr(self.store),
            judge=self.judge.name,
            max_shadow_usd_per_hour=self.config.max_shadow_usd_per_hour,
        )

    async def close(self, deadline: float) -> None:
        """Finish the queue until ``deadline`` (``time.monotonic()``), drop the rest, write, release."""
        self._accepting = False
        remaining = deadline - time.monotonic()
        if remaining > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.queue.join(), timeout=remaining)
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
        left = 0
        while not self.queue.empty():
            self.queue.get_nowait()
            self.queue.task_done()
            left += 1
        if left:
            self._dropped("shutdown", left)
        await self.writer.close(max(deadline - time.monotonic(), _FINAL_WRITE_MIN_S))
        await self.pool.close()
        with contextlib.suppress(Exception):  # a hung store must not hold the shutdown
            await asyncio.wait_for(self.store.close(), timeout=_FINAL_WRITE_MIN_S)
        closer = getattr(self.judge, "aclose", None)
        if closer is not None:
            with contextlib.suppress(Exception):
                await closer()
        log_event("learning_stopped", dropped_at_shutdown=left)

    # --- workers ----------------------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            sample = await self.queue.get()
            try:
                await self._process(sample)
            except asyncio.CancelledError:
                self._dropped("shutdown")
                raise
            finally:
                self.queue.task_done()

    async def _process(self, sample: Sample) -> None:
        """One sample: skip it while the store is down (before any money is spent), else rows."""
        if not self.writer.accepting():
            self._dropped("store_error")
            return
        try:
            rows = await self.runner.rows(sample)
        except SampleDroppedError as dropped:
            self._dropped(dropped.reason)
            return
        except Exception:
            log_exception("learning_sample_failed", query_id=sample.query_id)
            self._dropped("error")
            return
        if not self.writer.submit(rows):
            self._dropped("store_error")

    def _dropped(self, reason: str, samples: int = 1) -> None:
        if samples:
            self.metrics.child(self.metrics.dropped, reason).inc(samples)
