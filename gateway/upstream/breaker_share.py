"""The circuit breakers shared by the replicas through Redis (``RedisKeys.breaker(model)``).

Written only off the happy path: a failed call increments the model's shared consecutive count
(the breaker opens when the replicas' failures together reach ``failures``), an opening writes its
``open_until``, and the first success after failures resets the count (a closing also clears
``open_until``). Read once a second by ``refresh`` (the shared state's Redis loop), which makes every
replica adopt an opening and the shared count (so a success on any replica resets it). Redis down
or slow (each write bounded by ``timeout_s``): each replica goes on with its own counts.
"""

from __future__ import annotations

import asyncio
import logging

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.redis.keys import RedisKeys
from gateway.upstream.breaker import Breaker, Breakers

log = logging.getLogger("cascade.breaker")

_FAILURES = "failures"
_OPEN_UNTIL = "open_until"


class SharedBreakers:
    """The Redis side of ``Breakers``; ``None`` results mean Redis did not answer."""

    def __init__(self, breakers: Breakers, redis: Redis, keys: RedisKeys, timeout_s: float = 0.5):
        self._breakers = breakers
        self._redis = redis
        self._keys = keys
        self._timeout_s = timeout_s

    async def failed(self, breaker: Breaker) -> None:
        """A call failed: count it with the other replicas', open the circuit when they reach the
        limit, and write an opening."""
        key = self._keys.breaker(breaker.model)
        try:
            async with asyncio.timeout(self._timeout_s):
                async with self._redis.pipeline(transaction=False) as pipe:
                    pipe.hincrby(key, _FAILURES, 1)
                    pipe.expire(key, round(breaker.policy.window_s + breaker.policy.open_s) + 1)
                    count, _ = await pipe.execute()
        except (RedisError, OSError, TimeoutError):
            count = None
        if breaker.failed(int(count) if count is not None else None):
            await self._write(breaker.model, {_OPEN_UNTIL: repr(breaker.open_until)})

    async def succeeded(self, breaker: Breaker) -> None:
        """A call succeeded after failures (or closed the circuit): reset the shared count."""
        key = self._keys.breaker(breaker.model)
        try:
            async with asyncio.timeout(self._timeout_s):
                async with self._redis.pipeline(transaction=False) as pipe:
                    pipe.hset(key, _FAILURES, "0")
                    pipe.hdel(key, _OPEN_UNTIL)
                    await pipe.execute()
        except (RedisError, OSError, TimeoutError):
            pass

    async def refresh(self) -> None:
        """Read every model's shared state and adopt its openings (once a second, in the background)."""
        breakers = list(self._breakers.by_model.values())
        if not breakers:
            return
        try:
            async with asyncio.timeout(self._timeout_s * 10):
                async with self._redis.pipeline(transaction=False) as pipe:
                    for breaker in breakers:
                        pipe.hmget(self._keys.breaker(breaker.model), [_OPEN_UNTIL, _FAILURES])
                    values = await pipe.execute()
        except (RedisError, OSError, TimeoutError):
            return
        for breaker, (open_until, failures) in zip(breakers, values, strict=True):
            count = _seconds(failures)
            breaker.adopt(_seconds(open_until), int(count) if count is not None else 0)

    async def _write(self, model: str, fields: dict[str, str]) -> None:
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._redis.hset(self._keys.breaker(model), mapping=fields)  # type: ignore[misc]
        except (RedisError, OSError, TimeoutError):
            log.warning("circuit of %s: its opening was not shared (Redis did not answer)", model)


def _seconds(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
