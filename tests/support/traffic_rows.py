"""What a traffic store (a JSONL file or the test PostgreSQL) holds, read by the store's own export."""

from __future__ import annotations

import asyncio

from traffic.backends import open_store
from traffic.rows import TrafficRow


def stored_rows(url: str) -> list[TrafficRow]:
    """Every row the store at ``url`` holds (empty when it holds none or does not exist yet)."""

    async def read() -> list[TrafficRow]:
        store = open_store(url)
        try:
            return await store.export()
        finally:
            await store.close()

    return asyncio.run(read())
