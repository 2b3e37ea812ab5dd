"""The records of every replica in one capped Redis stream, with an index by request id.

Keys (docs/contracts.md#redis-keys): ``{prefix}:console:requests``, a stream trimmed to about
``max_records`` entries (``XADD MAXLEN ~``), each entry the record's filter fields (``id``, ``tier``,
``key``, ``outcome``, ``reason``) and its JSON (``record``); ``{prefix}:console:index``, a sorted set
request id -> the millisecond of its stream entry's id, trimmed to the same cap. One Lua script does
both, queued on the request path's ``RedisBatcher`` (gateway.redis.batch): it goes out in the loop
iteration's pipeline and the request waits for nothing.

``get`` reads the index (``ZSCORE``), then the entries of that one millisecond (``XRANGE ms-0 ms-max``:
a handful, not a scan) and keeps the one with the id. ``page`` filters in Redis (a read-only script
walking ``XREVRANGE`` in chunks, at most the scan budget) and returns only the matches.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.records.store import SCAN_BUDGET, Page, RecordFilter
from gateway.redis.batch import LuaScript, RedisBatcher
from gateway.redis.keys import RedisKeys

log = logging.getLogger("cascade.console")

# Trim the index once it holds this many more than the cap (ZCARD is O(1); trimming in batches).
INDEX_SLACK = 256

WRITE_SCRIPT = LuaScript.of(
    """
local stream, index = KEYS[1], KEYS[2]
local cap = tonumber(ARGV[1])
local entry = redis.call('XADD', stream, 'MAXLEN', '~', cap, '*',
  'id', ARGV[2], 'tier', ARGV[3], 'key', ARGV[4], 'outcome', ARGV[5], 'reason', ARGV[6], 'record', ARGV[7])
redis.call('ZADD', index, tonumber(string.match(entry, '^(%d+)')), ARGV[2])
if redis.call('ZCARD', index) > cap + tonumber(ARGV[8]) then
  redis.call('ZREMRANGEBYRANK', index, 0, -(cap + 1))
end
return entry
"""
)

# ARGV: start ('+' or '(' .. entry id), limit, scan budget, then tier, key, outcome, reason ('' = any).
# An entry's fields are read by position, in the order WRITE_SCRIPT writes them: id, tier, key,
# outcome, reason, record (flat[2], flat[4], ... flat[12]).
_PAGE = """
local stream = KEYS[1]
local start, limit, budget = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local tier, key, outcome, reason = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local wanted_reason = ',' .. reason .. ','
local found, scanned, last = {}, 0, false
while scanned < budget and #found < limit do
  local chunk = redis.call('XREVRANGE', stream, start, '-', 'COUNT', math.min(1000, budget - scanned))
  if #chunk == 0 then return {found, '', scanned} end
  for _, entry in ipairs(chunk) do
    scanned = scanned + 1
    last = entry[1]
    local flat = entry[2]
    if (tier == '' or flat[4] == tier) and (key == '' or flat[6] == key)
      and (outcome == '' or flat[8] == outcome)
      and (reason == '' or string.find(',' .. flat[10] .. ',', wanted_reason, 1, true)) then
      found[#found + 1] = flat[12]
      if #found >= limit then break end
    end
  end
  start = '(' .. last
end
return {found, last or '', scanned}
"""


class StreamStore:
    """Records in a capped Redis stream shared by every replica (see the module docstring)."""

    kind = "redis"

    def __init__(self, batcher: RedisBatcher, reader: Redis, keys: RedisKeys, capacity: int):
        """``batcher``: the request path's (writes); ``reader``: a client for the pages' reads."""
        self.capacity = capacity
        self._batcher = batcher
        self._reader = reader
        self._stream, self._index = keys.console_requests, keys.console_index
        self._page = reader.register_script(_PAGE)
        self._failed_logged_at = float("-inf")

    def write(self, request_id: str, record: dict[str, Any], data: bytes) -> None:
        """Queue the record's write in the loop iteration's pipeline; a failure is logged (once a
        minute), never raised: a record is worth less than the request."""
        args = write_args(self.capacity, request_id, record, data)
        future = self._batcher.run_script(WRITE_SCRIPT, (self._stream, self._index), args)
        future.add_done_callback(self._written)

    def _written(self, future: asyncio.Future[Any]) -> None:
        if future.cancelled() or future.exception() is None:
            return
        now = time.monotonic()
        if now - self._failed_logged_at >= 60.0:
            self._failed_logged_at = now
            log.warning("console record not written: %s", future.exception())

    async def get(self, request_id: str) -> dict[str, Any] | None:
        """The record of ``request_id``: its index entry, then that millisecond's entries."""
        millisecond = await self._reader.zscore(self._index, request_id)
        if millisecond is None:
            return None
        ms = int(millisecond)
        entries = await self._reader.xrange(self._stream, f"{ms}-0", f"{ms}-18446744073709551615")
        for _, fields in entries:  # the reader decodes replies (gateway.assembly.state.connect_redis)
            if fields.get("id") == request_id:
                record: dict[str, Any] = orjson.loads(fields["record"])
                return record
        return None  # trimmed from the stream (the approximate cap) before the index

    async def page(
        self, where: RecordFilter, cursor: str | None, limit: int, scan_budget: int = SCAN_BUDGET
    ) -> Page:
        """Matches newest first, filtered in Redis; ``cursor`` is a stream entry id."""
        start = f"({cursor}" if cursor else "+"
        filters = (where.tier, where.key_id, where.outcome, where.reason)
        args: list[str | int] = [start, limit, scan_budget, *(value or "" for value in filters)]
        found, last, scanned = await self._page(keys=[self._stream], args=args)
        last_id = _text(last)
        exhausted = not last_id or (len(found) < limit and scanned < scan_budget)
        return Page([orjson.loads(data) for data in found], None if exhausted else last_id, int(scanned))

    async def count(self) -> int:
        """Entries in the stream now (about the cap once full)."""
        try:
            return int(await self._reader.xlen(self._stream))
        except RedisError:
            return 0


def write_args(
    capacity: int, request_id: str, record: dict[str, Any], data: bytes
) -> tuple[str | int | bytes, ...]:
    """``WRITE_SCRIPT``'s ARGV for one record (keys: the stream, then the index)."""
    return (
        capacity,
        request_id,
        record.get("tier") or "",
        record.get("key_id") or "",
        record.get("outcome") or "",
        record.get("reason") or "",
        data,
        INDEX_SLACK,
    )


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value
