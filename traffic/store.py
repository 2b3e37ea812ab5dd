"""The traffic store: where sampled rows go, shared by replicas or local to one process.

What every backend implements and shares: the async ``TrafficStore`` protocol, its errors and the
filter/time helpers. ``traffic.backends.open_store(url)`` picks the backend from the URL:
``postgresql://...`` (shared by replicas, ``traffic.postgres_store``) or
``file:///path/traffic.jsonl`` (embedded single-process default, ``traffic.file_store``); the
backends import this module, never the other way round. Failures are ``StoreUnavailableError`` (the
store cannot be reached: the caller decides to drop the batch) or ``StoreError`` (bad URL, bad
filter).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

from traffic.rows import FILTER_COLUMNS, TrafficRow

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class StoreError(Exception):
    """A store cannot be used as asked (bad URL, bad filter); one-line message."""


class StoreUnavailableError(StoreError):
    """The store did not answer (down, refused, timed out); the rows of the call were not written."""


@runtime_checkable
class TrafficStore(Protocol):
    """What every backend does. Safe to call from several tasks at once."""

    async def write_rows(self, batch: Sequence[TrafficRow]) -> int:
        """Write a batch in one go; returns the rows written (a stored (query_id, model) is skipped)."""
        ...

    async def export(
        self, since: datetime | None = None, where: Mapping[str, str] | None = None
    ) -> list[TrafficRow]:
        """Rows recorded at or after ``since`` whose ``where`` columns equal the values (as text)."""
        ...

    async def purge(self, older_than: datetime) -> int:
        """Delete rows recorded before ``older_than`` (retention); returns how many."""
        ...

    async def close(self) -> None:
        """Release connections and files."""
        ...


def check_where(where: Mapping[str, str] | None) -> dict[str, str]:
    """The filter as a dict; StoreError for a column rows cannot be filtered on."""
    where = dict(where or {})
    unknown = [c for c in where if c not in FILTER_COLUMNS]
    if unknown:
        raise StoreError(f"cannot filter on '{unknown[0]}' (columns: {', '.join(FILTER_COLUMNS)})")
    return where


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``7d``, ``12h``, ``30m``, ``90s``, ``2w`` (that long ago) or an ISO-8601 date/time (UTC if naive)."""
    now = now or datetime.now(UTC)
    match = _DURATION.match(text)
    if match:
        return now - timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[match.group(2)])
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise StoreError(f"--since {text!r}: expected a duration (7d, 12h, 30m) or an ISO date") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
