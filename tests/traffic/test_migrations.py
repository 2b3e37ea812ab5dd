"""Schema migrations of the PostgreSQL store: versioned, applied once, safe when replicas start together."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import asyncpg
import pytest

from tests.support.postgres import POSTGRES_URL, drop_schema
from traffic.migrations import MIGRATIONS, migrate
from traffic.store import StoreError


@pytest.fixture
def schema() -> Iterator[str]:
    name = f"traffic_test_{uuid.uuid4().hex[:12]}"
    yield name
    drop_schema(name)


async def test_migrate_applies_every_version_once_then_nothing(schema: str) -> None:
    conn = await asyncpg.connect(POSTGRES_URL)
    try:
        assert await migrate(conn, schema) == [v for v, _ in MIGRATIONS]
        assert await migrate(conn, schema) == []
        versions = [
            r["version"] for r in await conn.fetch(f"SELECT version FROM {schema}.traffic_schema_version")
        ]
        columns = {
            r["column_name"]
            for r in await conn.fetch(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = $1 AND table_name = 'traffic_rows'",
                schema,
            )
        }
    finally:
        await conn.close()
    assert versions == [v for v, _ in MIGRATIONS]
    assert {
        "query_id",
        "model",
        "correct",
        "logprobs",
        "recorded_at",
        "tier",
        "policy_id",
        "replica",
    } <= columns


async def test_replicas_migrating_at_once_apply_each_version_exactly_once(schema: str) -> None:
    connections = [await asyncpg.connect(POSTGRES_URL) for _ in range(4)]
    try:
        applied = await asyncio.gather(*(migrate(conn, schema) for conn in connections))
    finally:
        for conn in connections:
            await conn.close()
    assert sorted(len(a) for a in applied) == [0, 0, 0, len(MIGRATIONS)]


async def test_a_schema_name_that_is_not_a_plain_identifier_is_refused() -> None:
    with pytest.raises(StoreError, match="schema"):
        await migrate(None, "x; DROP TABLE y")
