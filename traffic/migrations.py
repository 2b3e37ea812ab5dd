"""Versioned, idempotent schema migrations of the PostgreSQL traffic store.

Each migration is applied once, in order, inside one transaction that holds an advisory lock on the
schema's name, so replicas starting together never race; the applied versions are recorded in
``<schema>.traffic_schema_version``. Running ``migrate`` again changes nothing.
"""

from __future__ import annotations

import re
from typing import Any

from traffic.store import StoreError

TABLE = "traffic_rows"
VERSION_TABLE = "traffic_schema_version"
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

# (version, SQL with {schema}); never edit an applied migration: append a new one.
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        f"""
        CREATE TABLE {{schema}}.{TABLE} (
            id bigserial PRIMARY KEY,
            recorded_at timestamptz NOT NULL,
            query_id text NOT NULL,
            model text NOT NULL,
            correct double precision CHECK (correct BETWEEN 0 AND 1),
            prompt_tokens bigint NOT NULL DEFAULT 0,
            completion_tokens bigint NOT NULL DEFAULT 0,
            cost_usd double precision NOT NULL DEFAULT 0,
            logprobs jsonb,
            score double precision,
            latency_ms double precision,
            dataset text,
            tier text,
            policy_id text,
            replica text,
            judge text,
            prompt text,
            response text,
            UNIQUE (query_id, model)
        );
        CREATE INDEX {TABLE}_recorded_at ON {{schema}}.{TABLE} (recorded_at);
        """,
    ),
    (
        2,
        # The request kind of each row. Rows stored before it did not record theirs: they read as
        # text, as a runs table without the column does (``--since`` leaves such a window out).
        f"""
        ALTER TABLE {{schema}}.{TABLE} ADD COLUMN kind text NOT NULL DEFAULT 'text'
            CHECK (kind IN ('text', 'tool_call', 'structured_output'));
        """,
    ),
    (
        3,
        # A sampled request's router features and decision (``traffic.rows.TrafficRow.route``), for
        # refitting the router; rows stored before it have none.
        f"""
        ALTER TABLE {{schema}}.{TABLE} ADD COLUMN route jsonb;
        """,
    ),
)


def check_identifier(name: str) -> str:
    """A schema name safe to put in SQL (lower case letters, digits, underscores)."""
    if not _IDENTIFIER.match(name):
        raise StoreError(f"traffic store schema {name!r}: use lower-case letters, digits and underscores")
    return name


async def migrate(conn: Any, schema: str) -> list[int]:
    """Bring ``schema`` to the latest version; returns the versions applied now (empty if up to date)."""
    check_identifier(schema)
    applied_now: list[int] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"cascade-traffic:{schema}")
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {schema}.{VERSION_TABLE} "
            "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {r["version"] for r in await conn.fetch(f"SELECT version FROM {schema}.{VERSION_TABLE}")}
        for version, sql in MIGRATIONS:
            if version in done:
                continue
            await conn.execute(sql.format(schema=schema))
            await conn.execute(f"INSERT INTO {schema}.{VERSION_TABLE} (version) VALUES ($1)", version)
            applied_now.append(version)
    return applied_now
