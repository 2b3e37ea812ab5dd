"""Per-client-key spend limits over a fixed window: reserve the worst case first, settle after.

Before the upstream calls the request path reserves the route's worst-case cost; the reservation is
admitted only if spent + reserved + this amount stays within the key's limit. After the calls it
settles with the actual cost, which releases the unused part. With Redis the check-and-add is one
Lua script, so any number of replicas together never admit more than the limit; without Redis the
same rule runs in process. Amounts are kept as integer nano-USD so counters never drift.

If Redis is unreachable, reservations fall back to the in-process counters (each replica then
enforces the limit on its own traffic: at most N x the limit over N replicas) rather than refusing
every request or admitting unlimited spend; the fallback is logged and counted.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.auth import ClientIdentity
from gateway.errors import BudgetExceededError
from gateway.redis_keys import RedisKeys

log = logging.getLogger("cascade.spend")

NANO_PER_USD = 1_000_000_000
# Counters outlive their window a little so a late settle still finds them.
_TTL_MARGIN_S = 300

# KEYS[1] counter; ARGV amount, limit (nano-USD), ttl (s). Returns {admitted 0|1, spent after}.
_RESERVE_LUA = """
local spent = tonumber(redis.call('GET', KEYS[1]) or '0')
local amount = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
if spent >= limit or spent + amount > limit then
  return {0, spent}
end
local after = redis.call('INCRBY', KEYS[1], amount)
if redis.call('TTL', KEYS[1]) < 0 then
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
end
return {1, after}
"""

# KEYS[1] counter; ARGV delta (nano-USD, may be negative). A counter whose window expired is left alone.
_SETTLE_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local after = redis.call('INCRBY', KEYS[1], tonumber(ARGV[1]))
if after < 0 then
  redis.call('SET', KEYS[1], 0, 'KEEPTTL')
  after = 0
end
return after
"""


def to_nano(amount_usd: float) -> int:
    """USD -> integer nano-USD, rounded up (a reservation never under-counts)."""
    return max(0, math.ceil(round(amount_usd * NANO_PER_USD, 3)))


@dataclass(slots=True)
class Reservation:
    """A reserved amount for one request; settle it exactly once."""

    key_id: str
    window_start: int
    amount_nano: int
    backend: str  # "redis" or "memory"
    settled: bool = field(default=False)


class SpendLimiter:
    """Reserve/settle spend against per-key limits in fixed windows of ``window_s`` seconds."""

    def __init__(
        self,
        *,
        window_s: int,
        redis: Redis | None = None,
        keys: RedisKeys | None = None,
        clock: Callable[[], float] = time.time,
        on_redis_status: Callable[[bool], None] | None = None,
    ):
        self.window_s = window_s
        self._redis = redis
        self._keys = keys or RedisKeys()
        self._clock = clock
        self._on_redis_status = on_redis_status
        self._memory: dict[tuple[str, int], int] = {}
        self._reserve_script = redis.register_script(_RESERVE_LUA) if redis is not None else None
        self._settle_script = redis.register_script(_SETTLE_LUA) if redis is not None else None

    def window_start(self) -> int:
        """Start (unix seconds) of the current window."""
        return int(self._clock() // self.window_s) * self.window_s

    async def reserve(self, identity: ClientIdentity, amount_usd: float) -> Reservation | None:
        """Reserve ``amount_usd`` for this request; None when the caller has no key or no limit.

        Raises BudgetExceededError (429, with Retry-After until the window ends) if the key's limit
        would be exceeded.
        """
        if identity.key_id is None or identity.limit_usd is None:
            return None
        amount = to_nano(amount_usd)
        limit = math.floor(round(identity.limit_usd * NANO_PER_USD, 3))
        window = self.window_start()
        if self._reserve_script is not None:
            try:
                admitted, spent = await self._reserve_script(
                    keys=[self._keys.spend(identity.key_id, window)],
                    args=[amount, limit, self.window_s + _TTL_MARGIN_S],
                )
                self._report_redis(True)
                backend = "redis"
            except (RedisError, OSError) as exc:
                self._report_redis(False)
                log.warning("spend store unreachable (%s): enforcing key %s in process", exc, identity.key_id)
                admitted, spent = self._reserve_in_memory(identity.key_id, window, amount, limit)
                backend = "memory"
        else:
            admitted, spent = self._reserve_in_memory(identity.key_id, window, amount, limit)
            backend = "memory"
        if not admitted:
            raise self._exceeded(identity, int(spent), amount, window)
        return Reservation(identity.key_id, window, amount, backend)

    async def settle(self, reservation: Reservation | None, actual_usd: float) -> None:
        """Replace the reserved amount by the actual cost (releasing the rest); idempotent."""
        if reservation is None or reservation.settled:
            return
        reservation.settled = True
        delta = to_nano(actual_usd) - reservation.amount_nano
        if delta == 0:
            return
        if reservation.backend == "redis" and self._settle_script is not None:
            try:
                await self._settle_script(
                    keys=[self._keys.spend(reservation.key_id, reservation.window_start)], args=[delta]
                )
                self._report_redis(True)
            except (RedisError, OSError) as exc:
                # The full reservation stays counted: errs on the side of the limit.
                self._report_redis(False)
                log.warning("could not settle spend of key %s (%s)", reservation.key_id, exc)
            return
        slot = (reservation.key_id, reservation.window_start)
        if slot in self._memory:
            self._memory[slot] = max(0, self._memory[slot] + delta)

    async def spent_usd(self, key_id: str) -> float:
        """Spent + reserved USD of a key in the current window (Redis if configured)."""
        window = self.window_start()
        if self._redis is not None:
            try:
                raw = await self._redis.get(self._keys.spend(key_id, window))
                return int(raw or 0) / NANO_PER_USD
            except (RedisError, OSError):
                pass
        return self._memory.get((key_id, window), 0) / NANO_PER_USD

    def _reserve_in_memory(self, key_id: str, window: int, amount: int, limit: int) -> tuple[int, int]:
        # No await between the check and the add: atomic within the event loop.
        slot = (key_id, window)
        if slot not in self._memory:
            self._memory = {k: v for k, v in self._memory.items() if k[1] >= window}  # drop old windows
        spent = self._memory.get(slot, 0)
        if spent >= limit or spent + amount > limit:
            return 0, spent
        self._memory[slot] = spent + amount
        return 1, spent + amount

    def _exceeded(
        self, identity: ClientIdentity, spent: int, amount: int, window: int
    ) -> BudgetExceededError:
        resets = window + self.window_s
        retry_after = max(1, math.ceil(resets - self._clock()))
        reset_at = datetime.fromtimestamp(resets, UTC).isoformat(timespec="seconds")
        return BudgetExceededError(
            f"Spend limit of ${identity.limit_usd:g} per {self.window_s}s window reached for this API key "
            f"(spent or reserved ${spent / NANO_PER_USD:.6f}; this request may cost up to "
            f"${amount / NANO_PER_USD:.6f}). The window resets at {reset_at}.",
            headers={"Retry-After": str(retry_after)},
        )

    def _report_redis(self, up: bool) -> None:
        if self._on_redis_status is not None:
            self._on_redis_status(up)
