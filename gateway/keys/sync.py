"""This replica's spend ledgers and their reconciliation with Redis (the recovery half of spend limits).

``gateway.keys.spend.SpendLimiter`` admits and settles; this base class keeps what the replica counted
per key and window (``gateway.keys.ledger.Ledger``) and brings Redis up to date with it:

* Redis's epoch marker tells a live Redis from one that lost its data; a new epoch makes every
  charge this replica made in the current windows be written back (``_adopt_epoch``);
* operations whose outcome is unknown (a timed-out reservation, a settlement while Redis was
  down) are repeated by id once Redis answers (``Retry``), idempotently;
* what was counted in process during an outage is written back once (``apply_once``).

``maintain()`` runs that round about once a second off the request path; the request path runs it
too before it uses Redis again after an outage or data loss (``_usable_epoch``). A failed Redis call
makes the request path skip Redis for ``_RETRY_S`` seconds (``_failed``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Literal

from redis.exceptions import RedisError, ResponseError

from gateway.keys.budget_periods import SpendWindow
from gateway.keys.ledger import NANO_PER_USD, Ledger, Reservation, Retry
from gateway.keys.spend_store import EPOCH_CHANGED, RedisSpendStore, new_op_id
from gateway.wire.logs import log_event

log = logging.getLogger("cascade.spend")

# After a failed Redis call the request path skips Redis for this long (the maintenance loop probes).
_RETRY_S = 1.0
# At most one failure line per this many seconds for an outage's timeouts and connection errors.
_LOG_EVERY_S = 10.0

FallbackReason = Literal["timeout", "error", "down", "epoch", "refused"]


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
    ):
        """``store``: the request path's (None: no Redis); ``background_store``: the one
        ``maintain()`` uses; ``default_ttl_s``: a fixed window's counter lifetime."""
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
            if not probe and (time.monotonic() < self._down_until or settled):
                return True  # another request just did it, or found Redis down
            try:
                await self._reconcile(self._background_store if probe else self._store)
            except (RedisError, OSError, TimeoutError) as exc:
                self._failed(exc, "reconcile")
            else:
                self._down_until = 0.0
                self._dirty = bool(self._retries) or any(
                    led.local or led.sending for led in self._ledgers.values()
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
        self._epoch = epoch

    def unsynced_usd(self) -> float:
        """Spend counted in process that Redis does not hold yet (0 without Redis)."""
        if self._store is None:
            return 0.0
        pending = sum(led.local + sum(led.sending.values()) for led in self._ledgers.values())
        pending += sum(r.actual for r in self._retries if not r.cancel)
        return pending / NANO_PER_USD

    async def _usable_epoch(self) -> FallbackReason | None:
        """None when Redis may be tried now, else why not."""
        if time.monotonic() < self._down_until:
            return "down"
        if self._epoch is None or self._dirty:
            # First use, after data loss, or after an outage: learn the epoch and write back first,
            # so the shared counter includes this replica's outage spend before it admits more. The
            # background round may hold the lock for seconds: wait for it no longer than one call.
            assert self._store is not None
            if not await self._maintain(probe=False, wait_s=self._store.timeout_s):
                return "down" if self._epoch is None else None
            if time.monotonic() < self._down_until:
                return self._last_failure
            if self._epoch is None:
                return "epoch"
        return None

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
        """Redis failed ``operation``: skip it for ``_RETRY_S`` and log why. An error reply (Redis
        answered and refused the command) is logged every time: it is no outage and retrying will
        not cure it; an outage's timeouts and connection errors at most once per ``_LOG_EVERY_S``."""
        self._report_redis(False)
        self._down_until = time.monotonic() + _RETRY_S
        timed_out = isinstance(exc, TimeoutError) or "Timeout" in type(exc).__name__
        self._last_failure = "timeout" if timed_out else "error"
        refused = isinstance(exc, ResponseError)
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
        if self._on_redis_status is not None:
            self._on_redis_status(up)
