"""Where decision records are kept: the newest ``max_records``, whatever the traffic.

``RecordStore`` is what the recorder writes to and the console pages read: ``write`` costs the request
path no wait (no round trip: a Redis write is queued on the request-path batcher), ``get`` finds one
record by its request id without scanning, ``page`` lists the newest first with filters, reading at
most ``scan_budget`` records per page so a page's time is bounded however rare its filter is (the
page then says where it stopped and continues from there).

Two stores: ``RingStore`` (this module), an in-process ring for a gateway without Redis (each
replica sees its own requests), and ``StreamStore`` (gateway.records.stream_store), a capped Redis
stream every replica writes to.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

# Records one page request reads at most while looking for matches.
SCAN_BUDGET = 10_000


@dataclass(frozen=True, slots=True)
class RecordFilter:
    """A list's filters (None: any). ``reason`` matches one of a record's comma-separated reasons."""

    tier: str | None = None
    key_id: str | None = None
    outcome: str | None = None
    reason: str | None = None

    def matches(self, record: dict[str, Any]) -> bool:
        """Whether ``record`` passes every filter set."""
        if self.tier is not None and record.get("tier") != self.tier:
            return False
        if self.key_id is not None and (record.get("key_id") or "") != self.key_id:
            return False
        if self.outcome is not None and record.get("outcome") != self.outcome:
            return False
        return self.reason is None or self.reason in str(record.get("reason", "")).split(",")

    @property
    def empty(self) -> bool:
        """No filter is set."""
        return self.tier is None and self.key_id is None and self.outcome is None and self.reason is None


@dataclass(frozen=True, slots=True)
class Page:
    """Records newest first; ``next_cursor`` continues after the last one read (None: no older
    record); ``scanned``: records read to fill it (at most the scan budget)."""

    records: list[dict[str, Any]]
    next_cursor: str | None
    scanned: int


class RecordStore(Protocol):
    """Where records go and are read from (see the module docstring)."""

    kind: str
    capacity: int

    def write(self, request_id: str, record: dict[str, Any], data: bytes) -> None:
        """Keep ``record`` (``data``: its JSON) under ``request_id``; never waits, never raises."""

    async def get(self, request_id: str) -> dict[str, Any] | None:
        """The record of ``request_id``, or None when it is not (or no longer) kept."""

    async def page(
        self, where: RecordFilter, cursor: str | None, limit: int, scan_budget: int = SCAN_BUDGET
    ) -> Page:
        """Up to ``limit`` records matching ``where``, newest first, older than ``cursor``."""

    async def count(self) -> int:
        """Records kept now."""


class RingStore:
    """The newest ``capacity`` records in this process (a gateway without Redis)."""

    kind = "memory"

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._ring: deque[tuple[int, dict[str, Any]]] = deque()
        self._by_id: dict[str, dict[str, Any]] = {}
        self._next = 0  # sequence number of the next record (the cursor counts these)

    def write(self, request_id: str, record: dict[str, Any], data: bytes) -> None:
        """Keep ``record``, dropping the oldest past the capacity."""
        if len(self._ring) >= self.capacity:
            _, dropped = self._ring.popleft()
            self._by_id.pop(dropped["id"], None)
        self._ring.append((self._next, record))
        self._by_id[request_id] = record
        self._next += 1

    async def get(self, request_id: str) -> dict[str, Any] | None:
        """The record of ``request_id`` (a dict lookup)."""
        return self._by_id.get(request_id)

    async def page(
        self, where: RecordFilter, cursor: str | None, limit: int, scan_budget: int = SCAN_BUDGET
    ) -> Page:
        """Walk back from ``cursor`` (a sequence number; None: the newest)."""
        if not self._ring:
            return Page([], None, 0)
        first = self._ring[0][0]
        start = len(self._ring) - 1
        if cursor is not None:
            start = min(start, int(cursor) - 1 - first) if cursor.isdigit() else -1
        found: list[dict[str, Any]] = []
        scanned, index = 0, start
        while index >= 0 and scanned < scan_budget and len(found) < limit:
            record = self._ring[index][1]
            scanned += 1
            if where.matches(record):
                found.append(record)
            index -= 1
        next_cursor = str(self._ring[index + 1][0]) if index >= 0 else None
        return Page(found, next_cursor, scanned)

    async def count(self) -> int:
        """Records kept now."""
        return len(self._ring)
