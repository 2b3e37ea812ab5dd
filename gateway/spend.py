"""Per-client-key spend limits over a fixed window: reserve the worst case first, settle after.

Before the upstream calls the request path reserves the route's worst-case cost; the reservation is
admitted only if spent + reserved + this amount stays within the key's limit. After the calls it
settles with the actual cost, which releases the unused part, or charges more if the upstream
billed more than the worst case (the counter may then pass the limit, and the key is refused until
it is back under). Amounts are integer nano-USD so counters never drift.

With Redis every replica shares one counter per key and window (``gateway.spend_store``: atomic,
idempotent scripts, each bounded by ``redis_timeout_s``). When Redis cannot be used (an error, a
timeout, or it failed less than ``_RETRY_S`` ago so it is not even tried) the outage policy
applies:

* ``on_redis_down: local`` (default): the replica admits on its own, against what it last saw in
  Redis for the key plus what it counted since, up to ``outage_share`` of the key's remaining
  budget. What it counts in process is written back to Redis (once, idempotently) as soon as
  Redis answers, so the window total is right afterwards. Over N replicas a key can spend at most
  ``N * outage_share`` times its remaining budget during an outage (``outage_share = 1/N``: never
  more than the limit).
* ``on_redis_down: refuse``: keyed requests get 503 ``spend_unavailable`` while spend cannot be
  checked; nothing is overspent.

A Redis that lost its data (restart without persistence) is told apart by its epoch marker: each
replica then writes back every charge it had made in the current windows, so the counters are
rebuilt. Reservations whose outcome is unknown (a timed-out call may still execute when a frozen
Redis resumes) are cancelled by id once Redis answers, so none is left behind.

Without Redis the same admission rule runs in process (one replica).

The reservation also admits the key's request and token rate limits (gateway.rate_limits) in the
same Redis script and round trip, and the settlement settles their tokens; the window a key's spend
counts in is its budget period's (gateway.budget_periods) or the fixed ``window_s`` window.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from gateway.auth import ClientIdentity
from gateway.budget_periods import PeriodClock, SpendWindow, fixed_window
from gateway.errors import BudgetExceededError, RateLimitExceededError, SpendUnavailableError
from gateway.logs import log_event
from gateway.rate_limits import RATE_REFUSED, LocalRateCounter, RateState, RateWindows
from gateway.redis_batch import RedisBatcher
from gateway.redis_keys import RedisKeys
from gateway.spend_store import EPOCH_CHANGED, MAX_NANO, RedisSpendStore, ReserveExtras, new_op_id
from policies.charges import NANO_PER_USD

log = logging.getLogger("cascade.spend")

# Counters outlive their window a little so a late settle still finds them.
_TTL_MARGIN_S = 300
# After a failed Redis call the request path skips Redis for this long (the maintenance loop probes).
_RETRY_S = 1.0
# At most one fallback warning per this many seconds (with the count since the last one).
_LOG_EVERY_S = 10.0

OutagePolicy = Literal["local", "refuse"]
FallbackReason = Literal["timeout", "error", "down", "epoch", "refused"]


def to_nano(amount_usd: float) -> int:
    """USD -> integer nano-USD, rounded up (a reservation never under-counts), at most ``MAX_NANO``
    (what a counter holds; an amount that is not a finite number counts as that maximum too)."""
    nano = amount_usd * NANO_PER_USD
    if nano <= 0:
        return 0
    if not nano < MAX_NANO:  # past the largest count, or NaN
        return MAX_NANO
    return min(MAX_NANO, math.ceil(round(nano, 3)))


@dataclass(slots=True)
class Reservation:
    """A reserved amount for one request; settle it exactly once."""

    key_id: str
    window_start: int
    amount_nano: int
    backend: str  # "redis" or "memory"
    settled: bool = field(default=False)
    op_id: str = ""
    epoch: str | None = None  # Redis epoch it was recorded in (backend "redis")
    tokens: int = 0  # worst-case tokens counted in the key's rate-limit windows
    rate_keys: tuple[str, ...] = ()  # those windows (Redis hashes, or the in-process counter's keys)
    rate: RateState | None = None  # the windows' counts after admission (the x-ratelimit-* headers)
    ttl_s: int | None = None  # the spend counter's lifetime (a budget period's; None: the fixed window's)


@dataclass(frozen=True, slots=True)
class KeyUsage:
    """A key's usage view (``SpendLimiter.usage``): its spend window, limit (nano-USD, with any
    rollover; None: no USD limit), spent + reserved nano-USD, rate-limit counts, where they were
    read (``redis``; ``memory``: no Redis; ``replica``: Redis down, this replica's counts) and when."""

    window: SpendWindow
    limit_nano: int | None
    spent_nano: int
    rate: RateState | None
    source: str
    now: float


@dataclass(slots=True)
class _Ledger:
    """What this replica knows about one key in one window (nano-USD)."""

    seen: int = 0  # the Redis counter as last reported
    held: int = 0  # reservations admitted in process, not settled yet
    local: int = 0  # settled in process, not in Redis yet (written back when it answers)
    sending: dict[str, int] = field(default_factory=dict)  # write-backs in flight: op_id -> amount
    synced: int = 0  # this replica's settled charges that Redis holds in the current epoch
    expires: float = math.inf  # when Redis forgets the counter (unix seconds)
    ttl_s: int | None = None  # the counter's TTL (write-backs create it with this one)


@dataclass(slots=True)
class _Retry:
    """A Redis operation to repeat once Redis answers (finish or cancel of a reservation)."""

    reservation: Reservation
    actual: int
    cancel: bool
    tokens_delta: int = 0  # what the rate-limit windows' tokens change by when it lands


class SpendLimiter:
    """Reserve/settle spend against per-key limits in fixed windows of ``window_s`` seconds."""

    def __init__(
        self,
        *,
        window_s: int,
        redis: Redis | RedisBatcher | None = None,
        keys: RedisKeys | None = None,
        clock: Callable[[], float] = time.time,
        on_redis_status: Callable[[bool], None] | None = None,
        on_fallback: Callable[[str], None] | None = None,
        on_rate_limited: Callable[[str], None] | None = None,
        timeout_s: float = 0.1,
        on_redis_down: OutagePolicy = "local",
        outage_share: float = 1.0,
        maintenance_redis: Redis | None = None,
        maintenance_timeout_s: float = 2.0,
    ):
        """``redis``: the request-path client (every call bounded by ``timeout_s``), or the request
        path's ``RedisBatcher`` shared with the key lookups;
        ``maintenance_redis``: the client the periodic ``maintain()`` uses, off the request path, so
        a slow-but-alive Redis is not mistaken for an outage (default: ``redis``)."""
        self.window_s = window_s
        ttl = window_s + _TTL_MARGIN_S
        keys = keys or RedisKeys()
        self._store: RedisSpendStore | None = None
        if redis is not None:
            self._store = RedisSpendStore(redis, keys, timeout_s=timeout_s, counter_ttl_s=ttl)
        self._background_store = self._store
        if redis is not None and maintenance_redis is not None:
            self._background_store = RedisSpendStore(
                maintenance_redis, keys, timeout_s=maintenance_timeout_s, counter_ttl_s=ttl
            )
        self._clock = clock
        self._on_redis_status = on_redis_status
        self._on_fallback = on_fallback
        self._on_rate_limited = on_rate_limited
        self._policy = on_redis_down
        self._share = outage_share
        self._ledgers: dict[tuple[str, int], _Ledger] = {}
        self._retries: list[_Retry] = []
        self._epoch: str | None = None
        self._down_until = 0.0
        self._dirty = False  # there is something to write back or repeat
        self._last_failure: FallbackReason = "error"
        self._maintaining = asyncio.Lock()
        self._last_log = float("-inf")
        self._last_failure_log = float("-inf")
        self._unlogged = 0
        self._keys = keys
        self._rates = LocalRateCounter()
        self._periods = PeriodClock()
        self._fixed = SpendWindow(0, 0, 0)  # the current fixed window, made once per window

    def window_start(self) -> int:
        """Start (unix seconds) of the current fixed window (keys without a budget period)."""
        return int(self._clock() // self.window_s) * self.window_s

    def window(self, identity: ClientIdentity, now: float | None = None) -> SpendWindow:
        """The spend window of ``identity`` at ``now``: its budget period's, else the fixed one."""
        now = self._clock() if now is None else now
        if identity.period is None:
            fixed = self._fixed
            if not fixed.start <= now < fixed.end:
                fixed = self._fixed = fixed_window(now, self.window_s)
            return fixed
        return self._periods.window(identity.period, now, identity.created_at)

    # -- request path ---------------------------------------------------------------------------

    async def reserve(
        self, identity: ClientIdentity, amount_usd: float, tokens: int = 0
    ) -> Reservation | None:
        """Reserve ``amount_usd`` (and ``tokens`` worst-case tokens in the key's rate-limit windows)
        for this request; None when the caller has no key, or neither a USD nor a rate limit.

        Raises BudgetExceededError (429, with Retry-After until the window ends) if the key's limit
        would be exceeded, RateLimitExceededError (429, Retry-After until the refusing rate window
        ends) if a rate limit would, SpendUnavailableError (503) if Redis is down and the policy is
        ``refuse``.
        """
        if identity.key_id is None or not identity.metered:
            return None
        key_id = identity.key_id
        amount = to_nano(amount_usd)
        limit = MAX_NANO if identity.limit_usd is None else _nano_limit(identity.limit_usd)
        now = self._clock()
        win = self.window(identity, now)
        window = win.start
        rates = (
            RateWindows.at(identity.rate_limits, now, key_id, self._keys) if identity.rate_limits else None
        )
        op_id = new_op_id()
        ledger = self._ledger(key_id, win)
        base = Reservation(key_id, window, amount, "redis", op_id=op_id, tokens=tokens, ttl_s=win.ttl_s)
        if rates is not None:
            base.rate_keys = rates.keys
        if self._store is None:
            limit = self._local_limit(identity, win, limit, known=True)
            return self._reserve_locally(identity, base, ledger, win, limit, limit, rates, now)
        reason = await self._usable_epoch()
        if reason is None:
            epoch = self._epoch
            assert epoch is not None
            base.epoch = epoch
            extras = None  # a key without rate limits or a period: the store's fixed-window defaults
            if rates is not None or identity.period is not None:
                extras = ReserveExtras(rates, tokens, now, win.ttl_s, *self._rollover(identity, win))
            try:
                reply = await self._store.reserve(key_id, window, op_id, amount, limit, epoch, extras=extras)
            except (RedisError, OSError, TimeoutError) as exc:
                reason = self._failed(exc, "reserve")
                # It may still land when Redis resumes: cancel it by id then (tokens and request too).
                self._retries.append(_Retry(replace(base), 0, cancel=True, tokens_delta=-tokens))
                self._dirty = True
            else:
                self._report_redis(True)
                if reply.status == EPOCH_CHANGED:
                    self._lost_epoch(epoch)  # the next reconcile adopts the new one and writes back
                    reason = "epoch"
                else:
                    state = RateState.from_reply(rates, reply.rate_counts) if rates is not None else None
                    if reply.status == RATE_REFUSED:
                        assert state is not None
                        raise self._rate_exceeded(state, tokens, now)
                    ledger.seen = reply.spent_nano
                    if reply.status != 1:
                        raise self._exceeded(identity, reply.spent_nano, amount, win, state, now)
                    base.rate = state
                    return base
        if self._policy == "refuse":
            self._fallback("refused", key_id)
            raise SpendUnavailableError(
                "Spend limits cannot be checked right now (spend store unreachable); retry shortly.",
                headers={"Retry-After": "1"},
            )
        self._fallback(reason, key_id)
        limit = self._local_limit(identity, win, limit, known=False)
        allowance = ledger.seen + math.floor(self._share * max(0, limit - ledger.seen))
        base.epoch = None
        return self._reserve_locally(identity, base, ledger, win, limit, allowance, rates, now)

    async def settle(
        self, reservation: Reservation | None, actual_usd: float, tokens: int | None = None
    ) -> None:
        """Replace the reserved amount by the actual cost (releasing the rest), and the reserved
        tokens by the ``tokens`` used (None: unknown, the reserved count stays); idempotent.

        An actual cost above the reservation is charged in full: the counter may pass the limit,
        and the key is refused until it is back under.
        """
        if reservation is None or reservation.settled:
            return
        reservation.settled = True
        actual = to_nano(actual_usd)
        tokens_delta = tokens - reservation.tokens if tokens is not None and reservation.rate_keys else 0
        if actual == MAX_NANO:
            # No counter holds more: the key is refused for the rest of the window either way.
            log_event(
                "spend_amount_capped",
                level=logging.ERROR,
                key_id=reservation.key_id,
                charged_usd=actual_usd,
                counted_usd=MAX_NANO / NANO_PER_USD,
            )
        ledger = self._ledger_of(reservation)
        if reservation.backend != "redis":
            ledger.held = max(0, ledger.held - reservation.amount_nano)
            ledger.local += actual
            self._rates.settle(reservation.rate_keys, tokens_delta)
            self._dirty = self._store is not None
            return
        if self._store is None or reservation.epoch is None or reservation.epoch != self._epoch:
            ledger.local += actual  # its Redis data was lost: write the actual cost back
            self._dirty = True
            return
        if time.monotonic() < self._down_until:
            self._retries.append(_Retry(reservation, actual, cancel=False, tokens_delta=tokens_delta))
            self._dirty = True
            return
        try:
            result = await self._store.finish(
                reservation.key_id,
                reservation.window_start,
                reservation.op_id,
                actual,
                reservation.epoch,
                rate_keys=reservation.rate_keys,
                tokens_delta=tokens_delta,
            )
        except (RedisError, OSError, TimeoutError) as exc:
            self._failed(exc, "settle")
            # Idempotent: retried later.
            self._retries.append(_Retry(reservation, actual, cancel=False, tokens_delta=tokens_delta))
            self._dirty = True
            return
        self._report_redis(True)
        self._finished(reservation, actual, result)

    # -- recovery ------------------------------------------------------------------------------

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

    # -- views ------------------------------------------------------------------------------------

    async def usage(self, identity: ClientIdentity) -> KeyUsage:
        """What ``identity`` has spent and counted now: its window, limit with rollover, spend
        (settled + reserved) and rate-limit counts; from Redis when it answers, else from what
        this replica counted (``source``)."""
        assert identity.key_id is not None
        key_id, now = identity.key_id, self._clock()
        win = self.window(identity, now)
        rates = (
            RateWindows.at(identity.rate_limits, now, key_id, self._keys) if identity.rate_limits else None
        )
        limit = None if identity.limit_usd is None else _nano_limit(identity.limit_usd)
        previous, cap = self._rollover(identity, win)
        if self._store is not None:
            counters = [self._keys.spend(key_id, win.start), *([previous] if previous else [])]
            try:
                spent, counts = await self._store.read(counters, rates.keys if rates is not None else ())
            except (RedisError, OSError, TimeoutError):
                pass
            else:
                if limit is not None and previous is not None:
                    limit += min(cap, max(0, limit - spent[1]))
                state = RateState(rates, [c[0] for c in counts], [c[1] for c in counts]) if rates else None
                return KeyUsage(win, limit, spent[0], state, "redis", now)
        ledger = self._ledgers.get((key_id, win.start))
        if limit is not None:
            limit = self._local_limit(identity, win, limit, known=self._store is None)
        state = self._rates.counts_of(rates, now) if rates is not None else None
        source = "memory" if self._store is None else "replica"
        return KeyUsage(win, limit, _total(ledger) if ledger else 0, state, source, now)

    def rate_headers(self, reservation: Reservation | None) -> list[tuple[bytes, bytes]]:
        """The ``x-ratelimit-*`` headers of a rate-limited key's admitted request (else none)."""
        if reservation is None or reservation.rate is None:
            return []
        return reservation.rate.headers(self._clock())

    def unsynced_usd(self) -> float:
        """Spend counted in process that Redis does not hold yet (0 without Redis)."""
        if self._store is None:
            return 0.0
        pending = sum(led.local + sum(led.sending.values()) for led in self._ledgers.values())
        pending += sum(r.actual for r in self._retries if not r.cancel)
        return pending / NANO_PER_USD

    async def spent_usd(self, key_id: str) -> float:
        """Spent + reserved USD of a key in the current window (Redis if it answers)."""
        window = self.window_start()
        if self._store is not None:
            try:
                return await self._store.counter(key_id, window) / NANO_PER_USD
            except (RedisError, OSError, TimeoutError):
                pass
        ledger = self._ledgers.get((key_id, window)) or _Ledger()
        return (ledger.seen + ledger.held + ledger.local + sum(ledger.sending.values())) / NANO_PER_USD

    # -- internals ----------------------------------------------------------------------------

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

    def _reserve_locally(
        self,
        identity: ClientIdentity,
        reservation: Reservation,
        ledger: _Ledger,
        win: SpendWindow,
        limit: int,
        allowance: int,
        rates: RateWindows | None,
        now: float,
    ) -> Reservation:
        # No await between the checks and the adds: atomic within the event loop.
        amount = reservation.amount_nano
        spent = _total(ledger)
        state = None
        if rates is not None:
            share = 1.0 if self._store is None else self._share
            admitted, state = self._rates.admit(rates, reservation.tokens, now, share)
            if not admitted:
                raise self._rate_exceeded(state, reservation.tokens, now)
        if spent >= limit or spent + amount > allowance:
            if rates is not None:
                self._rates.undo(rates, reservation.tokens)
            raise self._exceeded(identity, spent, amount, win, state, now)
        ledger.held += amount
        reservation.backend, reservation.rate = "memory", state
        return reservation

    def _rollover(self, identity: ClientIdentity, win: SpendWindow) -> tuple[str | None, int]:
        """(previous period's counter, cap in nano-USD) when the key's period rolls over, else (None, 0)."""
        period = identity.period
        if win.previous_start is None or period is None or not period.rollover_cap_usd:
            return None, 0
        assert identity.key_id is not None
        return self._keys.spend(identity.key_id, win.previous_start), _nano_limit(period.rollover_cap_usd)

    def _local_limit(self, identity: ClientIdentity, win: SpendWindow, limit: int, *, known: bool) -> int:
        """The limit with its rollover, from what this replica counted of the previous period
        (``known``: it counted all of it, no Redis; otherwise no rollover is assumed unless it saw it)."""
        counter, cap = self._rollover(identity, win)
        if counter is None or identity.key_id is None or win.previous_start is None:
            return limit
        previous = self._ledgers.get((identity.key_id, win.previous_start))
        if previous is None and not known:
            return limit
        unused = max(0, limit - (_total(previous) if previous is not None else 0))
        return min(MAX_NANO, limit + min(cap, unused))

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

    def _ledger(self, key_id: str, win: SpendWindow) -> _Ledger:
        ledger = self._ledgers.get((key_id, win.start))
        if ledger is None:
            self._drop_old_windows()
            ledger = _Ledger(expires=win.start + win.ttl_s, ttl_s=win.ttl_s)
            self._ledgers[(key_id, win.start)] = ledger
        return ledger

    def _ledger_of(self, reservation: Reservation) -> _Ledger:
        """The ledger of the window a reservation was made in."""
        ledger = self._ledgers.get((reservation.key_id, reservation.window_start))
        if ledger is not None:
            return ledger
        ttl = reservation.ttl_s or self.window_s + _TTL_MARGIN_S
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

    def _fallback(self, reason: str, key_id: str) -> None:
        """Count the fallback; log at most one line per ``_LOG_EVERY_S`` seconds."""
        if self._on_fallback is not None:
            self._on_fallback(reason)
        self._unlogged += 1
        now = time.monotonic()
        if now - self._last_log >= _LOG_EVERY_S:
            action = "refusing keyed requests" if self._policy == "refuse" else "enforcing limits in process"
            log.warning(
                "spend store unusable (%s, last key %s): %s; %d request(s) since the last report",
                reason,
                key_id,
                action,
                self._unlogged,
            )
            self._last_log = now
            self._unlogged = 0

    def _exceeded(
        self,
        identity: ClientIdentity,
        spent: int,
        amount: int,
        win: SpendWindow,
        rate: RateState | None = None,
        now: float | None = None,
    ) -> BudgetExceededError:
        now = self._clock() if now is None else now
        headers = {"Retry-After": str(max(1, math.ceil(win.end - now)))}
        if rate is not None:
            headers.update((k.decode(), v.decode()) for k, v in rate.headers(now))
        if identity.period is None:
            per = f"per {self.window_s}s window"
            resets = f" The window resets at {_iso(win.end)}."
        elif identity.period.kind == "none":
            per, resets = "(no reset period)", " It does not reset."
            headers["Retry-After"] = str(24 * 3600)
        else:
            per = f"per {identity.period.describe()} period"
            resets = f" The period resets at {_iso(win.end)}."
        limit = "none" if identity.limit_usd is None else f"${identity.limit_usd:g}"
        return BudgetExceededError(
            f"Spend limit of {limit} {per} reached for this API key "
            f"(spent or reserved ${spent / NANO_PER_USD:.6f}; this request may cost up to "
            f"${amount / NANO_PER_USD:.6f}).{resets}",
            headers=headers,
        )

    def _rate_exceeded(self, state: RateState, tokens: int, now: float) -> RateLimitExceededError:
        refused = state.refused_by(tokens) or ("requests", 0)
        kind, index = refused
        limit = state.windows.limits[index]
        cap = limit.requests if kind == "requests" else limit.tokens
        used = state.requests[index] if kind == "requests" else state.tokens[index]
        retry_after = state.retry_after_s(index, now)
        headers = {"Retry-After": str(retry_after)}
        headers.update((k.decode(), v.decode()) for k, v in state.headers(now))
        if self._on_rate_limited is not None:
            self._on_rate_limited(kind)
        return RateLimitExceededError(
            f"Rate limit reached for this API key on {kind} per {limit.window_s}s: limit {cap}, "
            f"used {used}"
            + (f", this request may use up to {tokens}" if kind == "tokens" else "")
            + f". Retry after {retry_after}s.",
            limit_kind=kind,
            headers=headers,
        )

    def _report_redis(self, up: bool) -> None:
        if self._on_redis_status is not None:
            self._on_redis_status(up)


def _nano_limit(usd: float) -> int:
    """A USD limit in nano-USD, rounded down (a limit is never exceeded by rounding)."""
    return min(MAX_NANO, math.floor(round(usd * NANO_PER_USD, 3)))


def _total(ledger: _Ledger) -> int:
    """Everything a ledger knows of its window: Redis's count and what this replica counted since."""
    return ledger.seen + ledger.held + ledger.local + sum(ledger.sending.values())


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat(timespec="seconds")
