"""Shift alarms shared by the replicas through Redis (``RedisKeys.shift_alarms(policy_id)``).

A hash per policy: alarmed tier -> unix seconds of the alarm. ``refresh`` runs on the shared
state's once-a-second Redis loop: it writes the tiers this replica alarmed since (``ShiftAlarms.unshared``),
then reads the hash and adopts it (``ShiftAlarms.adopt``): another replica's alarm, or an operator's
clear. Nothing on the request path touches Redis. ``clear`` (the admin endpoint) deletes a tier's
field at once. The key is per policy, so a new policy starts with no alarm; it expires a week after
its last write. Redis down: each replica goes on with its own alarms.
"""

from __future__ import annotations

import asyncio
import logging
import time

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.config.shift_alarm import ShiftAlarms
from gateway.redis.keys import RedisKeys

log = logging.getLogger("cascade.shift_alarm")

_TTL_S = 7 * 24 * 3600


class SharedShiftAlarms:
    """The Redis side of ``ShiftAlarms`` (see the module docstring)."""

    def __init__(self, alarms: ShiftAlarms, redis: Redis, keys: RedisKeys, timeout_s: float = 0.5):
        self._alarms = alarms
        self._redis = redis
        self._keys = keys
        self._timeout_s = timeout_s

    async def refresh(self) -> None:
        """Write this replica's new alarms, then adopt the replicas' (once a second, in the background)."""
        alarms = self._alarms
        policy_id = alarms.policy_id
        if policy_id is None:
            return
        key = self._keys.shift_alarms(policy_id)
        written = set(alarms.unshared)
        try:
            async with asyncio.timeout(self._timeout_s * 10):
                async with self._redis.pipeline(transaction=False) as pipe:
                    if written:
                        pipe.hset(key, mapping={tier: f"{time.time():.3f}" for tier in written})
                        pipe.expire(key, _TTL_S)
                    pipe.hkeys(key)
                    values = await pipe.execute()
        except (RedisError, OSError, TimeoutError):
            return
        if alarms.policy_id != policy_id:  # a new policy was loaded meanwhile
            return
        alarms.unshared -= written
        alarms.adopt(set(values[-1]))

    async def clear(self, tier: str) -> bool:
        """Delete ``tier``'s alarm for every replica; False when Redis did not answer."""
        policy_id = self._alarms.policy_id
        if policy_id is None:
            return True
        try:
            async with asyncio.timeout(self._timeout_s * 10):
                await self._redis.hdel(self._keys.shift_alarms(policy_id), tier)  # type: ignore[misc]
        except (RedisError, OSError, TimeoutError):
            log.warning("the clear of tier %s's shift alarm was not shared (Redis did not answer)", tier)
            return False
        return True
