"""Per-client-key spend limits over a fixed window: reserve the worst case first, settle after.

Before the upstream calls the request path reserves the route's worst-case cost; the reservation is
admitted only if spent + reserved + this amount stays within the key's limit. After the calls it
settles with the actual cost, which releases the unused part, or charges more if the upstream
billed more than the worst case (the counter may then pass the limit, and the key is refused until
it is back under). Amounts are integer nano-USD so counters never drift.

With Redis every replica shares one counter per key and window (``gateway.keys.spend_store``: atomic,
idempotent scripts, each bounded by ``redis_timeout_s``). A failed call is tried again until Redis
answers or the outage rule (gateway.keys.outage: Redis silent for ``outage_after_s``) says the
replica is degraded; then the outage policy applies:

* ``on_redis_down: local`` (default): the replica admits on its own, against what it last saw in
  Redis for the key plus what it counted since, up to its share of the key's remaining budget
  (``outage_share``, at most 1 / the live replicas: gateway.keys.outage). What it counts in process
  is written back to Redis (once, idempotently) as soon as Redis answers, so the window total is
  right afterwards. Over N live replicas a key spends at most its remaining budget during an
  outage, plus what each replica's last view had missed.
* ``on_redis_down: refuse``: keyed requests get 503 ``spend_unavailable`` while spend cannot be
  checked; nothing is overspent.

A Redis that lost its data (restart without persistence) is told apart by its epoch marker: each
replica then writes back every charge it had made in the current windows, so the counters are
rebuilt. Reservations whose outcome is unknown (a timed-out call may still execute when a frozen
Redis resumes) are cancelled by id once Redis answers, so none is left behind.

Without Redis the same admission rule runs in process (one replica). The amounts, reservations and
ledgers are ``gateway.keys.ledger``, the 429s ``gateway.keys.refusals``, and the reconciliation
with Redis (epoch, write-backs, repeated operations) the base class ``gateway.keys.sync.SpendSync``.

The reservation also admits the key's request and token rate limits (gateway.keys.rate_limits) in the
same Redis script and round trip, and the settlement settles their tokens; the window a key's spend
counts in is its budget period's (gateway.keys.budget_periods) or the fixed ``window_s`` window.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Literal

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.keys.auth import ClientIdentity
from gateway.keys.budget_periods import PeriodClock, SpendWindow, fixed_window
from gateway.keys.ledger import (
    NANO_PER_USD,
    KeyUsage,
    Ledger,
    Reservation,
    Retry,
    UsagePlan,
    ledger_total,
    nano_limit,
    to_nano,
)
from gateway.keys.rate_limits import RATE_REFUSED, RateState, RateWindows
from gateway.keys.refusals import budget_exceeded, rate_exceeded
from gateway.keys.spend_store import EPOCH_CHANGED, MAX_NANO, RedisSpendStore, ReserveExtras, new_op_id
from gateway.keys.sync import FallbackReason, SpendSync
from gateway.redis.batch import RedisBatcher
from gateway.redis.keys import RedisKeys
from gateway.wire.errors import RateLimitExceededError, SpendUnavailableError
from gateway.wire.exchange import Headers
from gateway.wire.logs import log_event

log = logging.getLogger("cascade.spend")

# Counters outlive their window a little so a late settle still finds them.
_TTL_MARGIN_S = 300
# At most one fallback warning per this many seconds (with the count since the last one).
_LOG_EVERY_S = 10.0

OutagePolicy = Literal["local", "refuse"]


class SpendLimiter(SpendSync):
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
        outage_after_s: float = 0.5,
        on_degraded: Callable[[bool], None] | None = None,
    ):
        """``redis``: the request-path client (every call bounded by ``timeout_s``), or the request
        path's ``RedisBatcher`` shared with the key lookups;
        ``maintenance_redis``: the client the periodic ``maintain()`` uses, off the request path, so
        a slow-but-alive Redis is not mistaken for an outage (default: ``redis``);
        ``outage_after_s``, ``on_degraded``: the outage rule's (gateway.keys.outage)."""
        self.window_s = window_s
        ttl = window_s + _TTL_MARGIN_S
        keys = keys or RedisKeys()
        store = background = None
        if redis is not None:
            store = background = RedisSpendStore(redis, keys, timeout_s=timeout_s, counter_ttl_s=ttl)
            if maintenance_redis is not None:
                background = RedisSpendStore(
                    maintenance_redis, keys, timeout_s=maintenance_timeout_s, counter_ttl_s=ttl
                )
        super().__init__(
            store,
            background,
            clock=clock,
            default_ttl_s=ttl,
            on_redis_status=on_redis_status,
            outage_after_s=outage_after_s,
            on_degraded=on_degraded,
        )
        self._on_fallback = on_fallback
        self._on_rate_limited = on_rate_limited
        self._policy = on_redis_down
        self._share = outage_share
        self._last_log = float("-inf")
        self._unlogged = 0
        self._keys = keys
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
        limit = MAX_NANO if identity.limit_usd is None else nano_limit(identity.limit_usd)
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
        attempt = self._reserve_in_redis
        admitted: Reservation | FallbackReason
        if self._redis_ready():  # the common case: one attempt, no retry loop to enter
            admitted = await attempt(identity, base, ledger, win, limit, rates, now)
            if isinstance(admitted, str):
                retry = functools.partial(attempt, identity, base, ledger, win, limit, rates, now)
                admitted = await self._until_redis_decides(retry, admitted)
        else:
            retry = functools.partial(attempt, identity, base, ledger, win, limit, rates, now)
            admitted = await self._until_redis_decides(retry)
        if isinstance(admitted, Reservation):
            return admitted
        reason = admitted
        if self._policy == "refuse":
            self._fallback("refused", key_id)
            raise SpendUnavailableError(
                "Spend limits cannot be checked right now (spend store unreachable); retry shortly.",
                headers={"Retry-After": "1"},
            )
        self._fallback(reason, key_id)
        limit = self._local_limit(identity, win, limit, known=False)
        allowance = ledger.seen + math.floor(self._outage.share(self._share) * max(0, limit - ledger.seen))
        base.epoch = None
        return self._reserve_locally(identity, base, ledger, win, limit, allowance, rates, now)

    async def _reserve_in_redis(
        self,
        identity: ClientIdentity,
        base: Reservation,
        ledger: Ledger,
        win: SpendWindow,
        limit: int,
        rates: RateWindows | None,
        now: float,
    ) -> Reservation | FallbackReason:
        """The reservation admitted by the Redis script, else why Redis could not decide (raises
        the 429s as ``reserve``)."""
        assert self._store is not None and self._epoch is not None
        key_id, amount, tokens, epoch = base.key_id, base.amount_nano, base.tokens, self._epoch
        base.epoch = epoch
        extras = None  # a key without rate limits or a period: the store's plain script
        if rates is not None or identity.period is not None:
            extras = ReserveExtras(rates, tokens, now, win.ttl_s, *self._rollover(identity, win))
        try:
            reply = await self._store.reserve(
                key_id, win.start, base.op_id, amount, limit, epoch, extras=extras
            )
        except (RedisError, OSError, TimeoutError) as exc:
            # It may still land when Redis resumes: cancel it by id then (tokens and request too).
            self._retries.append(Retry(replace(base), 0, cancel=True, tokens_delta=-tokens))
            self._dirty = True
            base.op_id = new_op_id()  # tried again under a new id: the cancel must not reach it
            return self._failed(exc, "reserve")
        self._report_redis(True)
        if reply.status == EPOCH_CHANGED:
            self._lost_epoch(epoch)  # the next reconcile adopts the new one and writes back
            return "epoch"
        state = None
        if rates is not None:
            state = RateState.from_reply(rates, reply.rate_counts)
            self._rates.saw(state)  # an outage counts on from here
        if reply.status == RATE_REFUSED:
            assert state is not None
            raise self._rate_exceeded(state, tokens, now)
        ledger.seen = reply.spent_nano
        if reply.status != 1:
            raise budget_exceeded(identity, reply.spent_nano, amount, win, self.window_s, state, now)
        base.rate = state
        return base

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
            self._retries.append(Retry(reservation, actual, cancel=False, tokens_delta=tokens_delta))
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
            self._retries.append(Retry(reservation, actual, cancel=False, tokens_delta=tokens_delta))
            self._dirty = True
            return
        self._report_redis(True)
        self._finished(reservation, actual, result)

    # -- views ------------------------------------------------------------------------------------

    async def usage(self, identity: ClientIdentity) -> KeyUsage:
        """What ``identity`` has spent and counted now: its window, limit with rollover, spend
        (settled + reserved) and rate-limit counts; from Redis when it answers, else from what
        this replica counted (``source``)."""
        return (await self.usages([identity]))[0]

    async def usages(self, identities: Sequence[ClientIdentity]) -> list[KeyUsage]:
        """``usage`` of every one of ``identities`` (keys, not anonymous), read from Redis in one
        pipeline (the console's Keys page: O(keys) reads, one round trip)."""
        now = self._clock()
        plans = [self._usage_plan(identity, now) for identity in identities]
        if self._store is not None:
            counters = [name for plan in plans for name in plan.counters]
            windows = [name for plan in plans for name in (plan.rates.keys if plan.rates else ())]
            try:
                spent, counts = await self._store.read(counters, windows)
            except (RedisError, OSError, TimeoutError):
                pass
            else:
                out = []
                for plan in plans:
                    n, w = len(plan.counters), len(plan.rates.keys) if plan.rates else 0
                    out.append(plan.from_redis(spent[:n], counts[:w], now))
                    spent, counts = spent[n:], counts[w:]
                return out
        return [
            self._usage_here(identity, plan, now) for identity, plan in zip(identities, plans, strict=True)
        ]

    def _usage_plan(self, identity: ClientIdentity, now: float) -> UsagePlan:
        assert identity.key_id is not None
        key_id = identity.key_id
        win = self.window(identity, now)
        rates = (
            RateWindows.at(identity.rate_limits, now, key_id, self._keys) if identity.rate_limits else None
        )
        limit = None if identity.limit_usd is None else nano_limit(identity.limit_usd)
        previous, cap = self._rollover(identity, win)
        counters = [self._keys.spend(key_id, win.start), *([previous] if previous else [])]
        return UsagePlan(win, rates, limit, previous is not None, cap, counters)

    def _usage_here(self, identity: ClientIdentity, plan: UsagePlan, now: float) -> KeyUsage:
        """What this replica counted (no Redis, or Redis did not answer)."""
        assert identity.key_id is not None
        win, limit = plan.window, plan.limit
        ledger = self._ledgers.get((identity.key_id, win.start))
        if limit is not None:
            limit = self._local_limit(identity, win, limit, known=self._store is None)
        state = self._rates.counts_of(plan.rates, now) if plan.rates is not None else None
        source = "memory" if self._store is None else "replica"
        return KeyUsage(win, limit, ledger_total(ledger) if ledger else 0, state, source, now)

    def rate_headers(self, reservation: Reservation | None) -> Headers:
        """The ``x-ratelimit-*`` headers of a rate-limited key's admitted request (else none)."""
        if reservation is None or reservation.rate is None:
            return []
        return reservation.rate.headers(self._clock())

    async def spent_usd(self, key_id: str) -> float:
        """Spent + reserved USD of a key in the current window (Redis if it answers)."""
        window = self.window_start()
        if self._store is not None:
            try:
                return await self._store.counter(key_id, window) / NANO_PER_USD
            except (RedisError, OSError, TimeoutError):
                pass
        ledger = self._ledgers.get((key_id, window)) or Ledger()
        return (ledger.seen + ledger.held + ledger.local + sum(ledger.sending.values())) / NANO_PER_USD

    # -- internals ----------------------------------------------------------------------------

    def _reserve_locally(
        self,
        identity: ClientIdentity,
        reservation: Reservation,
        ledger: Ledger,
        win: SpendWindow,
        limit: int,
        allowance: int,
        rates: RateWindows | None,
        now: float,
    ) -> Reservation:
        # No await between the checks and the adds: atomic within the event loop.
        amount = reservation.amount_nano
        spent = ledger_total(ledger)
        state = None
        if rates is not None:
            share = 1.0 if self._store is None else self._outage.share(self._share)
            admitted, state = self._rates.admit(rates, reservation.tokens, now, share)
            if not admitted:
                raise self._rate_exceeded(state, reservation.tokens, now)
            self._dirty = self._store is not None  # written back before Redis admits again
        if spent >= limit or spent + amount > allowance:
            if rates is not None:
                self._rates.undo(rates, reservation.tokens)
            raise budget_exceeded(identity, spent, amount, win, self.window_s, state, now)
        ledger.held += amount
        reservation.backend, reservation.rate = "memory", state
        return reservation

    def _rollover(self, identity: ClientIdentity, win: SpendWindow) -> tuple[str | None, int]:
        """(previous period's counter, cap in nano-USD) when the key's period rolls over, else (None, 0)."""
        period = identity.period
        if win.previous_start is None or period is None or not period.rollover_cap_usd:
            return None, 0
        assert identity.key_id is not None
        return self._keys.spend(identity.key_id, win.previous_start), nano_limit(period.rollover_cap_usd)

    def _local_limit(self, identity: ClientIdentity, win: SpendWindow, limit: int, *, known: bool) -> int:
        """The limit with its rollover, from what this replica counted of the previous period
        (``known``: it counted all of it, no Redis; otherwise no rollover is assumed unless it saw it)."""
        counter, cap = self._rollover(identity, win)
        if counter is None or identity.key_id is None or win.previous_start is None:
            return limit
        previous = self._ledgers.get((identity.key_id, win.previous_start))
        if previous is None and not known:
            return limit
        unused = max(0, limit - (ledger_total(previous) if previous is not None else 0))
        return min(MAX_NANO, limit + min(cap, unused))

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

    def _rate_exceeded(self, state: RateState, tokens: int, now: float) -> RateLimitExceededError:
        error = rate_exceeded(state, tokens, now)
        if self._on_rate_limited is not None:
            self._on_rate_limited(error.type)
        return error
