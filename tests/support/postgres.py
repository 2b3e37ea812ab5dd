"""The test PostgreSQL (127.0.0.1:5432, database ``test``, trust auth) and private test schemas."""

from __future__ import annotations

import asyncio

POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


def drop_schema(schema: str) -> None:
    """Drop a test's private schema and everything in it (own event loop: works from sync fixtures)."""
    import asyncpg

    async def drop() -> None:
        conn = await asyncpg.connect(POSTGRES_URL, timeout=10)
        try:
            await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        finally:
            await conn.close()

    asyncio.run(drop())
