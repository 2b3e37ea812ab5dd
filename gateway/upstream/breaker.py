"""The circuit breaker of each configured model (its ``BreakerPolicy``, docs/contracts.md#faults).

A call (all its retries) to a model either succeeds (an answer, or the upstream refusing the request
itself: it is up) or fails (a timeout, a broken connection, a 429, a 5xx, a malformed answer). The
circuit opens after ``failures`` consecutive failed calls or a failure rate of ``failure_rate``
over ``window_s`` (with at least ``min_calls`` calls in it); while open the model is not called:
a cascade escalates past it (reason ``circuit_open``) and a request with no stage left gets 503
``upstream_circuit_open`` with Retry-After. ``open_s`` after opening, one call is let through (half
open): its success closes the circuit, its failure opens it again.

The happy path costs one comparison (``admit`` of a closed circuit) and the window's counters: the
state lives in process. With Redis (gateway.upstream.breaker_share) the replicas share it: a failed
call counts in the shared consecutive count, an opening is written there and every replica adopts it
at its next refresh (the state's once-a-second Redis loop); the failure rate is each replica's own.
Every state change is a log line and the gauge ``cascade_upstream_circuit_state{model}``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from enum import IntEnum

from gateway.config.fail_over import BreakerPolicy
from gateway.telemetry.metrics import GatewayMetrics
from gateway.wire.errors import GatewayError
from gateway.wire.logs import log_event

# Buckets of a failure-rate window: a call costs an increment, not an entry in a list.
_BUCKETS = 10


class CircuitState(IntEnum):
    """A circuit's state; its value is ``cascade_upstream_circuit_state``'s."""

    CLOSED = 0
    OPEN = 1
    HALF_OPEN = 2


class CircuitOpenError(GatewayError):
    """503: the only model left to call is skipped while its circuit is open."""

    status = 503
    type = "server_error"
    code = "upstream_circuit_open"


class Breaker:
    """One model's circuit. ``clock`` is wall time (unix seconds: shared with other replicas)."""

    def __init__(
        self,
        model: str,
        policy: BreakerPolicy,
        clock: Callable[[], float],
        on_change: Callable[[Breaker, str], None],
    ):
        self.model = model
        self.policy = policy
        self.clock = clock
        self.state = CircuitState.CLOSED
        self.open_until = 0.0
        self.consecutive = 0
        self._probing = False
        self._on_change = on_change
        self._width = policy.window_s / _BUCKETS
        self._bucket = 0  # index of the current bucket (time // width)
        self._calls = [0] * _BUCKETS
        self._failed = [0] * _BUCKETS

    def admit(self) -> bool:
        """Whether a call may go now (an open circuit's first call after ``open_s`` is its probe)."""
        if self.state is CircuitState.CLOSED:
            return True
        if self.state is CircuitState.OPEN:
            if self.clock() < self.open_until:
                return False
            self._move(CircuitState.HALF_OPEN, "open period over: one probe")
        if self._probing:
            return False
        self._probing = True
        return True

    def retry_after_s(self) -> float:
        """Seconds until the circuit lets a probe through (at least 1: a Retry-After)."""
        return max(1.0, math.ceil(self.open_until - self.clock()))

    def succeeded(self) -> bool:
        """A call succeeded; True when that changed what replicas share (the count or the state)."""
        self._count(failed=False)
        if self.state is CircuitState.CLOSED and not self.consecutive:
            return False
        self.consecutive = 0
        self._probing = False
        if self.state is not CircuitState.CLOSED:
            self._move(CircuitState.CLOSED, "a call succeeded")
        return True

    def failed(self, consecutive: int | None = None) -> bool:
        """A call failed (``consecutive``: the replicas' shared count with it, when Redis answered);
        True when the circuit opened."""
        self._count(failed=True)
        self.consecutive = self.consecutive + 1 if consecutive is None else consecutive
        self._probing = False
        if self.state is CircuitState.OPEN:
            return False  # a call admitted before it opened
        why = self._trips()
        if why is None:
            return False
        self.open(self.clock() + self.policy.open_s, why)
        return True

    def released(self) -> None:
        """A call ended without an outcome (cancelled): a probe's place is free again."""
        self._probing = False

    def open(self, until: float, why: str) -> None:
        """Open (or keep open) until ``until`` (unix seconds)."""
        self.open_until = until
        self._probing = False
        if self.state is not CircuitState.OPEN:
            self._move(CircuitState.OPEN, why)

    def adopt(self, open_until: float | None, failures: int) -> None:
        """The replicas' shared view (gateway.upstream.breaker_share): their consecutive failed calls
        (this replica's next success resets them) and an opening later than this one's; a closing is
        not taken (each replica probes once the shared open period is over)."""
        self.consecutive = failures
        if open_until is not None and open_until > self.clock() and open_until > self.open_until:
            self.open(open_until, "opened by another replica")

    def _trips(self) -> str | None:
        policy = self.policy
        if policy.failures and self.consecutive >= policy.failures:
            return f"{self.consecutive} consecutive failed calls"
        if self.state is CircuitState.HALF_OPEN:
            return "the probe failed"
        calls = sum(self._calls)
        if policy.failure_rate is not None and calls >= policy.min_calls:
            rate = sum(self._failed) / calls
            if rate >= policy.failure_rate:
                return f"{rate:.0%} of {calls} calls failed within {policy.window_s:g}s"
        return None

    def _count(self, *, failed: bool) -> None:
        bucket = int(self.clock() // self._width)
        if bucket != self._bucket:
            for passed in range(self._bucket + 1, min(bucket, self._bucket + _BUCKETS) + 1):
                self._calls[passed % _BUCKETS] = self._failed[passed % _BUCKETS] = 0
            self._bucket = bucket
        self._calls[bucket % _BUCKETS] += 1
        if failed:
            self._failed[bucket % _BUCKETS] += 1

    def _move(self, state: CircuitState, why: str) -> None:
        self.state = state
        self._on_change(self, why)


class Breakers:
    """Every configured model's breaker; reports each state change as the gauge and a log line."""

    def __init__(
        self,
        policies: Mapping[str, BreakerPolicy],
        metrics: GatewayMetrics,
        clock: Callable[[], float] = time.time,
    ):
        self._metrics = metrics
        self.by_model = {
            name: Breaker(name, policy, clock, self._changed)
            for name, policy in policies.items()
            if policy.enabled
        }
        for name in self.by_model:
            metrics.circuit_state.labels(name).set(0)

    def set_clock(self, clock: Callable[[], float]) -> None:
        """Time every breaker by ``clock`` (unix seconds; the tests' seam)."""
        for breaker in self.by_model.values():
            breaker.clock = clock

    def _changed(self, breaker: Breaker, why: str) -> None:
        self._metrics.circuit_state.labels(breaker.model).set(int(breaker.state))
        level = logging.INFO if breaker.state is CircuitState.CLOSED else logging.WARNING
        log_event(
            "circuit_" + breaker.state.name.lower(),
            level=level,
            model=breaker.model,
            reason=why,
            open_until=breaker.open_until if breaker.state is CircuitState.OPEN else None,
        )
