"""This replica's spend ledgers and their reconciliation with Redis (the recovery half of spend limits).

``gateway.keys.spend.SpendLimiter`` admits and settles; this base class keeps what the replica counted
per key and window (``gateway.keys.ledger.Ledger``) and brings Redis up to date with it:

* Redis's epoch marker tells a live Redis from one that lost its data; a new epoch makes every
  charge this replica made in the current windows be written back (``_adopt_epoch``);
* operations whose outcome is unknown (a timed-out reservation, a settlement while Redis was
  down) are repeated by id once Redis answers (``Retry``), idempotently;
* what was counted in process during an outage is written back once (``apply_once``, and the rate
  windows' requests and tokens by ``apply_rate_once``);
* the replica's heartbeat tells how many replicas share a key's headroom during an outage.

``maintain()`` runs that round about once a second off the request path; the request path runs it
too before it uses Redis again after an outage or data loss (``_usable_epoch``). Failed Redis calls
count towards the outage rule (gateway.keys.outage.OutageRule, one rule for spend and rate limits);
once it says degraded, the request path skips Redis for ``_RETRY_S`` seconds after each failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar, cast

from redis.exceptions import RedisError, ResponseError

from gateway.keys.budget_periods import SpendWindow
from gateway.keys.ledger import NANO_PER_USD, Ledger, Reservation, Retry
from gateway.keys.outage import REPLICA_TTL_S, OutageRule
from gateway.keys.rate_limits import LocalRateCounter
from gateway.keys.spend_store import EPOCH_CHANGED, RedisSpendStore, new_op_id
from gateway.wire.logs import log_event

log = logging.getLogger("cascade.spend")

# In degraded mode, after a failed Redis call the request path skips Redis for this long (the
# maintenance loop probes).
_RETRY_S = 1.0
# How long a replica shutting down tries to take itself off the live replicas.
_LEAVE_S = 0.5
# At most one failure line per this many seconds for an outage's timeouts and connection errors.
_LOG_EVERY_S = 10.0

FallbackReason = Literal["timeout", "error", "down", "epoch", "refused"]
T = TypeVar("T")


class SpendSync:
    """This replica's ledgers, the operations to repeat, and the round that reconciles them with Redis."""

    def __init__(
        self,
        store: RedisSpendStore | None,
        background_store: RedisSpendStore | None,
        *,
        clock: Callable[[], float],
        default_ttl_s: int,
        on_redis_status: Callable[[bool], None] | None,
        outage_after_s: float = 0.5,
        on_degraded: Callable[[bool], None] | None = None,
    ):
        """``store``: the request path's (None: no Redis); ``background_store``: the one
        ``maintain()`` uses; ``default_ttl_s``: a fixed window's counter lifetime;
        ``outage_after_s``, ``on_degraded``: the outage rule's (gateway.keys.outage)."""
        self._store = store
        self._background_store = background_store
        self._clock = clock
        self._default_ttl_s = default_ttl_s
        self._on_redis_status = on_redis_status
        self._ledgers: dict[tuple[str, int], Ledger] = {}
        self._retries: list[Retry] = []
        self._epoch: str | None = None
        self._down_until = 0.0
        self._dirty = False  # there is something to write back or repeat
        self._last_failure: FallbackReason = "error"
        self._maintaining = asyncio.Lock()
        self._last_failure_log = float("-inf")
        self._outage = OutageRule(outage_after_s, on_degraded)
        self._rates = LocalRateCounter()
        self._replica_id = new_op_id()
        self._round_failed = False  # the last reconcile round failed
        self._last_refused = False  # the last failure was an error reply (trying again will not help)

    async def maintain(self) -> None:
        """Reconcile with Redis (call about once a second): adopt a new epoch after data loss,
        repeat unfinished operations, write back what was counted in process. Never raises."""
        if self._background_store is not None and not self._maintaining.locked():
            await self._maintain(probe=True)

    async def _maintain(self, *, probe: bool, wait_s: float | None = None) -> bool:
        """One reconcile round under the lock; False if the lock was not free within ``wait_s``."""
        try:
            await asyncio.wait_for(self._maintaining.acquire(), wait_s)
        except TimeoutError:
            return False
        try:
            settled = not self._dirty and self._epoch is not None
            down = time.monotonic() < self._down_until
            if not probe and (down or settled):
                self._round_failed = down
                return True  # another request just did it, or found Redis down
            store = self._background_store if probe else self._store
            try:
                await self._reconcile(store)
                if probe:
                    assert store is not None
                    self._outage.live_replicas = await store.heartbeat(self._replica_id, REPLICA_TTL_S)
            except (RedisError, OSError, TimeoutError) as exc:
                self._failed(exc, "reconcile")
                self._round_failed = True
            else:
                self._down_until = 0.0
                self._round_failed = False
                self._dirty = (
                    bool(self._retries)
                    or any(led.local or led.sending for led in self._ledgers.values())
                    or self._rates.unsynced()
                )
            return True
        finally:
            self._maintaining.release()

    async def _reconcile(self, store: RedisSpendStore | None) -> None:
        assert store is not None
        epoch = await store.establish_epoch()
        self._report_redis(True)
        if epoch != self._epoch:
            if self._epoch is not None or any(ledger.synced for ledger in self._ledgers.values()):
                log.warning("spend store lost its data (new epoch): writing back this replica's spend")
            self._adopt_epoch(epoch)
        for retry in list(self._retries):
            reservation = retry.reservation
            if reservation.epoch != epoch:
                self._retries.remove(retry)
                if not retry.cancel:
                    self._ledger_of(reservation).local += retry.actual
                continue
            result = await store.finish(
                reservation.key_id,
                reservation.window_start,
                reservation.op_id,
                retry.actual,
                epoch,
                cancel=retry.cancel,
                rate_keys=reservation.rate_keys,
                tokens_delta=retry.tokens_delta,
                requests_delta=-1 if retry.cancel and reservation.rate_keys else 0,
            )
            self._retries.remove(retry)
            if not retry.cancel:
                self._finished(reservation, retry.actual, result)
        now = self._clock()
        for (key_id, window), ledger in list(self._ledgers.items()):
            if ledger.expires <= now:
                continue  # its counter has expired in Redis too
            if ledger.local and not ledger.sending:
                ledger.sending[new_op_id()] = ledger.local
                ledger.local = 0
            for op_id, amount in list(ledger.sending.items()):
                result = await store.apply_once(key_id, window, op_id, amount, epoch, ledger.ttl_s)
                if result == EPOCH_CHANGED:
                    self._lost_epoch(epoch)
                    return  # next round adopts the new epoch first
                del ledger.sending[op_id]
                ledger.synced += amount
                ledger.seen += amount
        for window_key, op_id, tally in self._rates.to_write_back(now, new_op_id):
            requests, tokens = tally.sending[op_id]
            result = await store.apply_rate_once(window_key, op_id, requests, tokens, epoch, tally.ttl_s)
            if result == EPOCH_CHANGED:
                self._lost_epoch(epoch)
                return
            self._rates.written_back(tally, op_id)
        self._drop_old_windows()

    def _adopt_epoch(self, epoch: str) -> None:
        """Redis is new or lost its data: everything this replica charged must be written again."""
        for ledger in self._ledgers.values():
            ledger.local += ledger.synced + sum(ledger.sending.values())
            ledger.synced = 0
            ledger.sending.clear()
            ledger.seen = 0
        for retry in self._retries:
            if not retry.cancel and retry.reservation.epoch != epoch:
                self._ledger_of(retry.reservation).local += retry.actual
        self._retries = [r for r in self._retries if r.reservation.epoch == epoch]
        self._rates.forget_redis()
        self._epoch = epoch

    async def leave(self) -> None:
        """Take this replica off the live replicas (at shutdown: the others' outage shares grow at
        once, not after ``REPLICA_TTL_S``). Never raises."""
        if self._background_store is not None:
            with contextlib.suppress(RedisError, OSError, TimeoutError):
                # Bounded: a shutdown with Redis down must not wait for the maintenance timeout.
                await asyncio.wait_for(self._background_store.leave(self._replica_id), _LEAVE_S)

    def live_replicas(self) -> float:
        """The replicas heard from in Redis, as this replica last read it (0: not known)."""
        return float(self._outage.live_replicas)

    def unsynced_usd(self) -> float:
        """Spend counted in process that Redis does not hold yet (0 without Redis)."""
        if self._store is None:
            return 0.0
        pending = sum(led.local + sum(led.sending.values()) for led in self._ledgers.values())
        pending += sum(r.actual for r in self._retries if not r.cancel)
        return pending / NANO_PER_USD

    async def _usable_epoch(self) -> FallbackReason | None:
        """None when Redis may be tried now, else why not."""
        if self._outage.degraded and time.monotonic() < self._down_until:
            return "down"
        if self._epoch is None or self._dirty:
            # First use, after data loss, or after an outage: learn the epoch and write back first,
            # so the shared counter includes this replica's outage spend before it admits more. The
            # background round may hold the lock for seconds: wait for it no longer than one call.
            assert self._store is not None
            if not await self._maintain(probe=False, wait_s=self._store.timeout_s):
                return "down" if self._epoch is None else None
            if self._round_failed:
                return self._last_failure
            if self._epoch is None:
                return "epoch"
        return None

    def _redis_ready(self) -> bool:
        """Redis usable with a known epoch (every request while Redis is healthy): an operation is
        tried at once, without awaiting the check, which would only say so."""
        return self._epoch is not None and not self._dirty and not self._outage.degraded

    async def _until_redis_decides(
        self, attempt: Callable[[], Awaitable[T | FallbackReason]], failed: FallbackReason | None = None
    ) -> T | FallbackReason:
        """What ``attempt`` (one request-path Redis operation) returned once Redis decided, else why
        Redis cannot decide. A failed attempt is made again (it takes a new op id itself) until Redis
        answers or the outage rule says degraded; a request waits no longer than ``outage_after_s``
        and one timeout in all (gateway.keys.outage). ``failed``: why the caller's own first attempt
        (made while ``_redis_ready``) failed; the attempts go on from there."""
        reason: FallbackReason | None = failed
        if reason is None:
            reason = None if self._redis_ready() else await self._usable_epoch()
            if reason is None:
                result = await attempt()
                if not isinstance(result, str):
                    return result
                reason = cast(FallbackReason, result)
        assert self._store is not None
        give_up = time.monotonic() + self._outage.after_s + self._store.timeout_s
        while reason in ("timeout", "error") and not self._outage.degraded and not self._last_refused:
            left = give_up - time.monotonic()
            if left <= 0:
                break
            if reason == "error":  # a refused connection fails at once: one attempt per timeout
                await asyncio.sleep(min(self._store.timeout_s, left))
            reason = await self._usable_epoch()
            if reason is None:
                result = await attempt()
                if not isinstance(result, str):
                    return result
                reason = cast(FallbackReason, result)
        return reason

    def _finished(self, reservation: Reservation, actual: int, result: int) -> None:
        ledger = self._ledger_of(reservation)
        if result == EPOCH_CHANGED:
            if reservation.epoch is not None:
                self._lost_epoch(reservation.epoch)
            ledger.local += actual
            self._dirty = True
        elif result == 1:
            ledger.synced += actual
            ledger.seen += actual - reservation.amount_nano
        # 0: nothing pending any more (an earlier attempt went through, or the window expired).

    def _lost_epoch(self, epoch: str) -> None:
        """Redis no longer holds ``epoch``: forget it, unless a newer one was adopted meanwhile (a
        reply can arrive after the reconcile loop moved on; forgetting the new epoch would write
        this replica's spend back a second time)."""
        if self._epoch == epoch:
            self._epoch = None

    def _ledger(self, key_id: str, win: SpendWindow) -> Ledger:
        ledger = self._ledgers.get((key_id, win.start))
        if ledger is None:
            self._drop_old_windows()
            ledger = Ledger(expires=win.start + win.ttl_s, ttl_s=win.ttl_s)
            self._ledgers[(key_id, win.start)] = ledger
        return ledger

    def _ledger_of(self, reservation: Reservation) -> Ledger:
        """The ledger of the window a reservation was made in."""
        ledger = self._ledgers.get((reservation.key_id, reservation.window_start))
        if ledger is not None:
            return ledger
        ttl = reservation.ttl_s or self._default_ttl_s
        return self._ledger(reservation.key_id, SpendWindow(reservation.window_start, 0, ttl))

    def _drop_old_windows(self) -> None:
        now = self._clock()
        for slot in [s for s, led in self._ledgers.items() if led.expires <= now and not led.sending]:
            del self._ledgers[slot]

    def _failed(self, exc: BaseException, operation: str) -> FallbackReason:
        """Redis failed ``operation``: count it towards the outage rule (degraded: skip Redis for
        ``_RETRY_S``) and log why. An error reply (Redis answered and refused the command) is logged
        every time: it is no outage and retrying will not cure it; an outage's timeouts and
        connection errors at most once per ``_LOG_EVERY_S``."""
        self._report_redis(False)
        timed_out = isinstance(exc, TimeoutError) or "Timeout" in type(exc).__name__
        self._last_failure = "timeout" if timed_out else "error"
        refused = self._last_refused = isinstance(exc, ResponseError)
        # An error reply is no outage (Redis answered): it neither starts nor ends one.
        if not refused and self._outage.failed(operation, f"{type(exc).__name__}: {exc}"):
            self._down_until = time.monotonic() + _RETRY_S
        now = time.monotonic()
        if refused or now - self._last_failure_log >= _LOG_EVERY_S:
            self._last_failure_log = now
            log_event(
                "spend_store_failed",
                level=logging.ERROR if refused else logging.WARNING,
                operation=operation,
                error=f"{type(exc).__name__}: {exc}",
            )
        return self._last_failure

    def _report_redis(self, up: bool) -> None:
        if up:
            self._outage.answered()
        if self._on_redis_status is not None:
            self._on_redis_status(up)
