"""When a replica stops asking Redis and decides spend and rate limits on its own: the outage rule.

**The rule.** A failed request-path Redis call (past ``redis_timeout_s``, or a connection error) is no
outage by itself: the request tries again (a fresh operation id; the failed one is cancelled by id,
so it counts nothing if it lands later), at most once per ``redis_timeout_s``. The replica enters
*degraded mode* only when Redis has not answered any call for ``budgets.outage_after_s`` (0.5 s by
default) since the first failure of the streak; any answer ends the streak. So one slow pipeline,
or a pause shorter than ``outage_after_s``, costs the requests it catches that wait and nothing
else: Redis still decides every admission. A request waits for Redis at most ``outage_after_s``
plus one ``redis_timeout_s``; past that it is decided in process (as in degraded mode).

**Degraded mode.** Each replica admits against what Redis last said of the key's window plus what
it admitted itself since, up to its *share* of the headroom Redis left: ``share = min(outage_share,
1 / live replicas)``, the live replicas being those that wrote their heartbeat to Redis in the last
``REPLICA_TTL_S`` (the maintenance round writes it every second; unknown: ``outage_share`` alone).
Why a share of the headroom and not the limit: the others may admit into the same headroom, and
none can ask them; split N ways the window's total stays within the limit plus what each replica's
last view had missed (the others' requests in flight when it last heard from Redis: about one per
replica under steady traffic). Redis is skipped for ``_RETRY_S`` after each failure in degraded
mode; the first request after that, or the maintenance round, tries it again.

**Recovery.** The first answer from Redis ends degraded mode; before the replica admits in Redis
again it writes back what it admitted in process (spend, and each rate window's requests and tokens,
once per operation id) and cancels what timed out (gateway.keys.sync), so the local admissions are
added to Redis's counts, not lost. Entering and leaving are each one log line (``limits_degraded``,
``limits_recovered``) and the metric ``cascade_limits_degraded`` (1 while degraded) with
``cascade_limits_degraded_entered_total``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gateway.wire.logs import log_event

# A replica counts as live while its heartbeat is younger than this (the maintenance round writes it
# about once a second: a replica that stopped is forgotten after a few missed rounds).
REPLICA_TTL_S = 5.0


class OutageRule:
    """The failure streak of one replica's Redis calls, and whether it is degraded (module doc)."""

    __slots__ = ("_on_change", "after_s", "degraded", "entered", "failing_since", "live_replicas")

    def __init__(self, after_s: float, on_change: Callable[[bool], None] | None = None):
        """``after_s``: how long Redis must fail to answer before degraded mode; ``on_change``:
        called with True on entering it, False on leaving it."""
        self.after_s = after_s
        self._on_change = on_change
        self.failing_since: float | None = None  # monotonic time of the streak's first failure
        self.degraded = False
        self.entered = 0  # times degraded mode was entered
        self.live_replicas = 0  # as last read from Redis (0: not known yet)

    def failed(self, operation: str, error: str) -> bool:
        """A Redis call failed now; whether the replica is degraded (entering it if the streak is
        ``after_s`` old)."""
        now = time.monotonic()
        if self.failing_since is None:
            self.failing_since = now
        if not self.degraded and now - self.failing_since >= self.after_s:
            self.degraded = True
            self.entered += 1
            log_event(
                "limits_degraded",
                level=logging.WARNING,
                failing_for_s=round(now - self.failing_since, 3),
                operation=operation,
                error=error,
                live_replicas=self.live_replicas,
            )
            if self._on_change is not None:
                self._on_change(True)
        return self.degraded

    def answered(self) -> None:
        """Redis answered a call: the streak ends, and degraded mode with it."""
        if self.failing_since is None:
            return
        if self.degraded:
            self.degraded = False
            log_event("limits_recovered", degraded_for_s=round(time.monotonic() - self.failing_since, 3))
            if self._on_change is not None:
                self._on_change(False)
        self.failing_since = None

    def wait_left_s(self) -> float:
        """Seconds until the current streak would make the replica degraded (0: it is, or will
        be at its next failure; ``after_s`` when nothing is failing)."""
        if self.failing_since is None:
            return self.after_s
        return max(0.0, self.failing_since + self.after_s - time.monotonic())

    def share(self, configured: float) -> float:
        """The share of the headroom this replica admits alone: ``configured`` (``outage_share``),
        at most one over the live replicas it last saw."""
        live = self.live_replicas
        return configured if live <= 1 else min(configured, 1.0 / live)
