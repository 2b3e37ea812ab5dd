"""The shared store: PostgreSQL through asyncpg, for several gateway replicas.

``postgresql://user@host:5432/db?schema=cascade_traffic&connect_timeout=5``: ``schema`` (default
``cascade_traffic``) holds the table ``traffic_rows`` and its migration record; the other URL
parameters go to the driver. The schema is migrated on first use (``traffic.migrations``); rows
stored before the ``kind`` column existed read as ``text`` (the column's default).

A batch is one ``INSERT ... SELECT FROM unnest(...)`` statement (one round trip whatever its size);
a (query_id, model) already stored is skipped, so a retried batch never duplicates rows. The pool
is created lazily and re-created after a failure, so a store that comes back is used again
without a restart. Every connection problem is a ``StoreUnavailableError``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redaction import redact_url
from traffic.migrations import TABLE, check_identifier, migrate
from traffic.rows import COLUMNS, TrafficRow, json_bytes
from traffic.store import StoreError, StoreUnavailableError, check_where

DEFAULT_SCHEMA = "cascade_traffic"
DEFAULT_CONNECT_TIMEOUT_S = 5.0
# Column -> PostgreSQL array type for the unnest of a batch; the order of COLUMNS.
_ARRAY_TYPES = {
    "query_id": "text[]",
    "model": "text[]",
    "correct": "float8[]",
    "prompt_tokens": "int8[]",
    "completion_tokens": "int8[]",
    "cost_usd": "float8[]",
    "logprobs": "text[]",
    "score": "float8[]",
    "latency_ms": "float8[]",
    "dataset": "text[]",
    "kind": "text[]",
    "timestamp": "timestamptz[]",
    "tier": "text[]",
    "policy_id": "text[]",
    "replica": "text[]",
    "judge": "text[]",
    "route": "text[]",
    "prompt": "text[]",
    "response": "text[]",
}
# Columns stored as jsonb (sent as text, cast in the INSERT).
_JSON_COLUMNS = ("logprobs", "route")
# In the table `timestamp` is called `recorded_at` (a reserved word otherwise).
_SQL_NAME = {c: ("recorded_at" if c == "timestamp" else c) for c in COLUMNS}


class PostgresStore:
    """A ``TrafficStore`` in one PostgreSQL schema."""

    def __init__(self, url: str, *, max_connections: int = 4):
        parts = urlsplit(url)
        params = dict(parse_qsl(parts.query))
        self.schema = check_identifier(params.pop("schema", DEFAULT_SCHEMA))
        try:
            self._connect_timeout = float(params.pop("connect_timeout", DEFAULT_CONNECT_TIMEOUT_S))
        except ValueError:
            raise StoreError(
                f"traffic store URL {redact_url(url)!r}: connect_timeout is not a number"
            ) from None
        self._dsn = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(params), ""))
        self._shown = redact_url(url)
        self._max_connections = max_connections
        self._pool: Any = None
        self._pool_lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"PostgresStore({self._shown!r})"

    @property
    def table(self) -> str:
        """The qualified table name."""
        return f"{self.schema}.{TABLE}"

    # --- TrafficStore -----------------------------------------------------------------------------

    async def write_rows(self, batch: Sequence[TrafficRow]) -> int:
        """Insert the batch in one statement; returns the rows inserted (duplicates skipped)."""
        if not batch:
            return 0
        records = [row.to_record() for row in batch]
        arrays = []
        for column in COLUMNS:
            values = [r[column] for r in records]
            if column in _JSON_COLUMNS:
                values = [None if v is None else json_bytes(v).decode() for v in values]
            elif column == "timestamp":
                values = [row.timestamp for row in batch]
            arrays.append(values)
        names = ", ".join(_SQL_NAME[c] for c in COLUMNS)
        unnest = ", ".join(f"${i}::{_ARRAY_TYPES[c]}" for i, c in enumerate(COLUMNS, start=1))
        selected = ", ".join(f"t.{c}::jsonb" if c in _JSON_COLUMNS else f"t.{_SQL_NAME[c]}" for c in COLUMNS)
        sql = (
            f"INSERT INTO {self.table} ({names}) SELECT {selected} FROM unnest({unnest}) AS t({names}) "
            "ON CONFLICT (query_id, model) DO NOTHING"
        )
        status = await self._run(lambda conn: conn.execute(sql, *arrays))
        return int(status.rsplit(" ", 1)[-1])

    async def export(
        self, since: datetime | None = None, where: Mapping[str, str] | None = None
    ) -> list[TrafficRow]:
        """Rows at or after ``since`` matching ``where``, in insertion order."""
        where = check_where(where)
        clauses: list[str] = []
        args: list[Any] = []
        if since is not None:
            args.append(since)
            clauses.append(f"recorded_at >= ${len(args)}")
        for column, value in where.items():
            args.append(value)
            clauses.append(f"{_SQL_NAME[column]} = ${len(args)}")
        sql = f"SELECT {', '.join(_SQL_NAME[c] for c in COLUMNS)} FROM {self.table}"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY id"
        records = await self._run(lambda conn: conn.fetch(sql, *args))
        rows = []
        for record in records:
            values = {c: record[_SQL_NAME[c]] for c in COLUMNS}
            for column in _JSON_COLUMNS:
                if values[column] is not None:
                    values[column] = json.loads(values[column])
            rows.append(TrafficRow(**values))
        return rows

    async def purge(self, older_than: datetime) -> int:
        """Delete rows recorded before ``older_than``; returns how many."""
        status = await self._run(
            lambda conn: conn.execute(f"DELETE FROM {self.table} WHERE recorded_at < $1", older_than)
        )
        return int(status.rsplit(" ", 1)[-1])

    async def close(self) -> None:
        """Close the pool (a later call opens a new one)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    # --- connection handling ----------------------------------------------------------------------

    async def _run(self, work: Any) -> Any:
        import asyncpg

        pool = await self._get_pool()
        try:
            async with pool.acquire(timeout=self._connect_timeout) as conn:
                return await work(conn)
        except (OSError, TimeoutError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError) as exc:
            raise StoreUnavailableError(f"traffic store {self._shown}: {_describe(exc)}") from exc
        except asyncpg.CannotConnectNowError as exc:
            raise StoreUnavailableError(f"traffic store {self._shown}: {_describe(exc)}") from exc

    async def _get_pool(self) -> Any:
        try:
            import asyncpg
        except ImportError:
            raise StoreError(
                "the PostgreSQL traffic store needs asyncpg: pip install 'cascade-gateway[traffic]'"
            ) from None
        async with self._pool_lock:
            if self._pool is not None:
                return self._pool
            try:
                pool = await asyncpg.create_pool(
                    self._dsn, min_size=0, max_size=self._max_connections, timeout=self._connect_timeout
                )
                async with pool.acquire(timeout=self._connect_timeout) as conn:
                    await migrate(conn, self.schema)
            except (
                OSError,
                TimeoutError,
                asyncpg.PostgresConnectionError,
                asyncpg.InterfaceError,
                asyncpg.CannotConnectNowError,
                asyncpg.InvalidCatalogNameError,
                asyncpg.InvalidAuthorizationSpecificationError,
            ) as exc:
                raise StoreUnavailableError(f"traffic store {self._shown}: {_describe(exc)}") from exc
            self._pool = pool
            return pool


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
