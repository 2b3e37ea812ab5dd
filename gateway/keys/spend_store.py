"""The spend counters in Redis: atomic, idempotent operations bounded by a short timeout.

Counter ``{prefix}:spend:{key_id}:{window_start}`` holds spent + reserved nano-USD of a key in a
window. Every operation is one Lua script and carries an id, so any of them can be retried, or
arrive late (a frozen Redis executes what was queued in its sockets when it resumes), without
counting twice:

* ``reserve(op_id, amount, limit)``: admit if spent + amount <= limit; records the reservation in the
  hash ``...:pending`` (op_id -> amount). A reservation cancelled before it arrived is not applied.
* ``finish(op_id, actual)``: replaces a recorded reservation by its actual cost (removing it from
  ``pending``); a second call finds nothing and does nothing. ``cancel`` = finish with actual 0,
  and leaves a tombstone so a reservation still in flight is refused when it lands.
* ``apply_once(op_id, amount)``: adds spend counted elsewhere (in process during an outage) once.

The reservation also checks and counts the key's rate limits, and ``finish`` settles their tokens,
in the same scripts (gateway.keys.rate_limits: their slots follow the spend ones, each part reading
them by name, ``gateway.redis.batch.ScriptSlots``), so a
keyed request still costs one round trip to admit and one to settle. A key without rate limits or a
budget period runs the spend part alone (``extras=None``, no ``rate_keys``): it sends none of their
arguments.

Amounts are integers of at most ``MAX_NANO`` (the largest Redis integer); the scripts pass them to
Redis as decimal strings, never as Lua numbers, so any amount is counted exactly, and a counter
that would pass ``MAX_NANO`` stays at it.

An epoch marker (``{prefix}:spend:epoch``, random, never expires) tells a live Redis from one that
lost its data: every script checks the caller's epoch first and does nothing on a mismatch
(``EPOCH_CHANGED``), so the caller can write back what it had counted before the loss.

Every call goes through a ``RedisBatcher`` (gateway.redis.batch): the operations of all requests
issued in one event-loop iteration (and the key lookups sharing the batcher) reach Redis as one
pipeline, each still its own atomic script with its own reply.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import NamedTuple

from redis.asyncio import Redis

from gateway.keys import rate_limits, spend_calls
from gateway.keys.rate_limits import RateWindows
from gateway.redis.batch import LuaScript, RedisBatcher, ScriptSlots
from gateway.redis.keys import RedisKeys

EPOCH_CHANGED = -2
# The largest amount a counter holds: the largest Redis integer, in nano-USD (about $9.2 billion).
MAX_NANO = 2**63 - 1
# How long tombstones and apply-once markers live: far longer than any command stays queued.
_MARKER_TTL_S = 900

# Amounts travel as decimal strings and reach INCRBY as such: a Lua number is a double, printed
# with an exponent past 10^14 (which INCRBY refuses) and inexact past 2^53. An increment that would
# pass the largest Redis integer saturates the counter at it instead of failing.
_SATURATING_ADD = """
local function add(key, delta)
  local reply = redis.pcall('INCRBY', key, delta)
  if type(reply) == 'table' and reply.err then
    redis.call('SET', key, '9223372036854775807', 'KEEPTTL')
    return 9223372036854775807
  end
  return reply
end
"""

# The slots of the spend part of every script: the counter, the pending reservations, the
# cancellation tombstone of the operation, the epoch marker.
_SPEND_KEYS = spend_calls.SPEND_KEYS  # packed in this order (gateway.keys.spend_calls)
_RESERVE_SLOTS = ScriptSlots(keys=_SPEND_KEYS, args=spend_calls.RESERVE_ARGS)
_RESERVE_BODY = """
if redis.call('GET', epoch_key) ~= epoch then return {-2, '0'} end
if redis.call('EXISTS', cancelled_key) == 1 then return {-1, '0'} end
local counted = redis.call('GET', spend_key) or '0'
local spent = tonumber(counted)
local limit = tonumber(spend_limit)
if spent >= limit or spent + tonumber(amount) > limit then
  return {0, counted}
end
add(spend_key, amount)
redis.call('HSET', pending_key, op_id, amount)
for _, key in ipairs({spend_key, pending_key}) do
  if redis.call('TTL', key) < 0 then redis.call('EXPIRE', key, tonumber(ttl)) end
end
return {1, redis.call('GET', spend_key)}
"""
# The key's rate limits (and a budget period's rollover) are checked in the same script, around the
# spend part (gateway.keys.rate_limits): one round trip admits both or neither.
_RESERVE_RATED_SLOTS = _RESERVE_SLOTS + rate_limits.RESERVE_RATE_SLOTS
_RESERVE_LUA = LuaScript.of(
    _RESERVE_RATED_SLOTS.lua()
    + _SATURATING_ADD
    + rate_limits.RESERVE_PRELUDE
    + "local function spend_reserve()"
    + _RESERVE_BODY
    + "end"
    + rate_limits.RESERVE_MAIN
)

# A key without rate limits or a budget period (most keys): the spend part alone, without the
# rate-limit arguments and rollover key the script above always takes.
_RESERVE_PLAIN_LUA = LuaScript.of(_RESERVE_SLOTS.lua() + _SATURATING_ADD + _RESERVE_BODY)

_FINISH_SLOTS = ScriptSlots(keys=_SPEND_KEYS, args=spend_calls.FINISH_ARGS)
_FINISH_BODY = """
if redis.call('GET', epoch_key) ~= epoch then return -2 end
local amount = redis.call('HGET', pending_key, op_id)
if not amount then
  if cancel == '1' then redis.call('SET', cancelled_key, '1', 'EX', tonumber(marker_ttl)) end
  return 0
end
redis.call('HDEL', pending_key, op_id)
if redis.call('EXISTS', spend_key) == 1 then
  redis.call('DECRBY', spend_key, amount)
  if add(spend_key, actual) < 0 then redis.call('SET', spend_key, 0, 'KEEPTTL') end
end
return 1
"""
# A settled reservation's tokens are settled in its rate-limit windows in the same script.
_FINISH_RATED_SLOTS = _FINISH_SLOTS + rate_limits.FINISH_RATE_SLOTS
_FINISH_LUA = LuaScript.of(
    _FINISH_RATED_SLOTS.lua()
    + _SATURATING_ADD
    + "local function spend_finish()"
    + _FINISH_BODY
    + "end"
    + rate_limits.FINISH_MAIN
)

# A reservation without rate-limit windows: the spend part alone.
_FINISH_PLAIN_LUA = LuaScript.of(_FINISH_SLOTS.lua() + _SATURATING_ADD + _FINISH_BODY)

# The calls are packed in the slots' order (gateway.keys.spend_calls): the rate part's too.
assert (
    ScriptSlots(spend_calls.RESERVE_RATE_KEYS, spend_calls.RESERVE_RATE_ARGS)
    == rate_limits.RESERVE_RATE_SLOTS
)
assert ScriptSlots(args=spend_calls.FINISH_RATE_ARGS) == rate_limits.FINISH_RATE_SLOTS

_APPLY_ONCE_LUA = LuaScript.of(
    _SATURATING_ADD
    + """
if redis.call('GET', KEYS[3]) ~= ARGV[2] then return -2 end
if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', tonumber(ARGV[4])) then return 0 end
add(KEYS[1], ARGV[1])
if redis.call('TTL', KEYS[1]) < 0 then redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3])) end
return 1
"""
)


# Adds requests and tokens admitted in process to a rate window once per op id (the write-back
# after an outage, gateway.keys.outage); the window's hash keeps its TTL, or gets one.
_APPLY_RATE_ONCE_LUA = LuaScript.of(
    """
if redis.call('GET', KEYS[3]) ~= ARGV[3] then return -2 end
if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', tonumber(ARGV[5])) then return 0 end
redis.call('HINCRBY', KEYS[1], 'r', ARGV[1])
redis.call('HINCRBY', KEYS[1], 't', ARGV[2])
if redis.call('TTL', KEYS[1]) < 0 then redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4])) end
return 1
"""
)

# A replica's heartbeat (scored by Redis's own clock, so replicas' clocks need not agree): the
# replicas heard from within ARGV[2] seconds are counted, older ones dropped.
_HEARTBEAT_LUA = LuaScript.of(
    """
local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
redis.call('EXPIRE', KEYS[1], math.ceil(2 * tonumber(ARGV[2])))
return redis.call('ZCARD', KEYS[1])
"""
)


class ReserveReply(NamedTuple):
    """``status``: 1 admitted, 0 refused (over the limit), -1 cancelled already, -2 epoch changed,
    -3 refused by a rate limit; ``rate_counts``: (requests, tokens) of each rate window, flattened."""

    status: int
    spent_nano: int
    rate_counts: tuple[int, ...] = ()


class ReserveExtras(NamedTuple):
    """What a reservation checks beyond the spend limit, in the same script: the key's rate-limit
    windows (``rate``, with the request's worst-case ``tokens`` and the time ``now``), a budget
    period's counter lifetime (``ttl_s``; None: the store's) and rollover (``rollover_from``: the
    previous period's counter; ``rollover_cap_nano``: the most of its unused limit carried over)."""

    rate: RateWindows | None = None
    tokens: int = 0
    now: float = 0.0
    ttl_s: int | None = None
    rollover_from: str | None = None
    rollover_cap_nano: int = 0


def new_op_id() -> str:
    """A random operation id (96 bits)."""
    return os.urandom(12).hex()


class RedisSpendStore:
    """The Redis half of the spend limiter; every call raises on error or after ``timeout_s``.

    ``redis``: a client, or a ``RedisBatcher`` shared with other request-path users (its own
    ``timeout_s`` then bounds the calls).
    """

    def __init__(self, redis: Redis | RedisBatcher, keys: RedisKeys, *, timeout_s: float, counter_ttl_s: int):
        self.keys = keys
        self._batch = RedisBatcher.wrap(redis, timeout_s)
        self.timeout_s = timeout_s
        self._counter_ttl_s = counter_ttl_s
        self._calls = spend_calls.SpendCalls(
            keys,
            reserve_plain=_RESERVE_PLAIN_LUA,
            reserve=_RESERVE_LUA,
            finish_plain=_FINISH_PLAIN_LUA,
            finish=_FINISH_LUA,
            marker_ttl_s=_MARKER_TTL_S,
        )

    async def establish_epoch(self) -> str:
        """The current epoch, creating one if Redis has none (new or wiped)."""
        # Both in one pipeline, in this order: the GET sees the SET's value or an older one.
        created = self._batch.execute("SET", self.keys.spend_epoch, new_op_id(), "NX")
        current = self._batch.execute("GET", self.keys.spend_epoch)
        _, value = await asyncio.gather(created, current)
        return value.decode() if isinstance(value, bytes) else str(value)

    async def reserve(
        self,
        key_id: str,
        window: int,
        op_id: str,
        amount: int,
        limit: int,
        epoch: str,
        *,
        extras: ReserveExtras | None = None,
    ) -> ReserveReply:
        """Admit ``amount`` nano-USD if it fits under ``limit`` (and the key's rate limits admit the
        request, ``extras``); see the module docstring."""
        calls = self._calls.window(key_id, window)
        if extras is None:
            command = self._calls.reserve_plain(calls, op_id, amount, limit, self._counter_ttl_s, epoch)
            reply = await self._batch.run_packed(_RESERVE_PLAIN_LUA, command)
            return ReserveReply(int(reply[0]), int(reply[1]))
        rollover = (
            (extras.rollover_from, extras.rollover_cap_nano) if extras.rollover_from else (calls.spend, -1)
        )
        ttl = extras.ttl_s or self._counter_ttl_s
        command = self._calls.reserve_rated(
            calls, op_id, amount, limit, ttl, epoch, rollover, extras.rate, extras.tokens
        )
        reply = await self._batch.run_packed(_RESERVE_LUA, command)
        return ReserveReply(
            int(reply[0]), int(reply[1]), tuple(map(int, reply[2:])) if len(reply) > 2 else ()
        )

    async def finish(
        self,
        key_id: str,
        window: int,
        op_id: str,
        actual: int,
        epoch: str,
        *,
        cancel: bool = False,
        rate_keys: Sequence[str] = (),
        tokens_delta: int = 0,
        requests_delta: int = 0,
    ) -> int:
        """Replace reservation ``op_id`` by ``actual`` (and its reserved tokens by ``tokens_delta``
        more in the windows ``rate_keys``): 1 done, 0 nothing pending, -2 epoch changed."""
        calls = self._calls.window(key_id, window)
        deltas = (requests_delta, tokens_delta)
        script, command = self._calls.finish(
            calls, op_id, actual, epoch, 1 if cancel else 0, rate_keys, deltas
        )
        return int(await self._batch.run_packed(script or _FINISH_PLAIN_LUA, command))

    async def apply_once(
        self, key_id: str, window: int, op_id: str, amount: int, epoch: str, ttl_s: int | None = None
    ) -> int:
        """Add ``amount`` once per ``op_id``: 1 added, 0 added before, -2 epoch changed."""
        counter = self.keys.spend(key_id, window)
        result = await self._batch.run_script(
            _APPLY_ONCE_LUA,
            (counter, self.keys.spend_applied(op_id), self.keys.spend_epoch),
            (amount, epoch, ttl_s or self._counter_ttl_s, _MARKER_TTL_S),
        )
        return int(result)

    async def apply_rate_once(
        self, window_key: str, op_id: str, requests: int, tokens: int, epoch: str, ttl_s: int
    ) -> int:
        """Add ``requests`` and ``tokens`` to rate window ``window_key`` once per ``op_id``: 1 added,
        0 added before, -2 epoch changed."""
        keys = (window_key, self.keys.spend_applied(op_id), self.keys.spend_epoch)
        args = (requests, tokens, epoch, ttl_s, _MARKER_TTL_S)
        return int(await self._batch.run_script(_APPLY_RATE_ONCE_LUA, keys, args))

    async def heartbeat(self, replica_id: str, ttl_s: float) -> int:
        """Record that replica ``replica_id`` is live; how many replicas were heard from within
        ``ttl_s`` seconds (this one included)."""
        args = (replica_id, str(ttl_s))
        return int(await self._batch.run_script(_HEARTBEAT_LUA, (self.keys.replicas,), args))

    async def leave(self, replica_id: str) -> None:
        """Take replica ``replica_id`` off the live replicas (it is shutting down)."""
        await self._batch.execute("ZREM", self.keys.replicas, replica_id)

    async def read(
        self, counters: Sequence[str], windows: Sequence[str]
    ) -> tuple[list[int], list[list[int]]]:
        """The values of spend ``counters`` (0 when absent) and the (requests, tokens) of rate
        ``windows``, in one pipeline (read-only: what a key's usage view shows)."""
        gets = [self._batch.execute("GET", name) for name in counters]
        hashes = [self._batch.execute("HMGET", name, "r", "t") for name in windows]
        values = await asyncio.gather(*gets, *hashes)
        spent = [int(v or 0) for v in values[: len(gets)]]
        return spent, [[int(x or 0) for x in pair] for pair in values[len(gets) :]]

    async def counter(self, key_id: str, window: int) -> int:
        """The counter's value (0 when absent)."""
        raw = await self._batch.execute("GET", self.keys.spend(key_id, window))
        return int(raw or 0)
