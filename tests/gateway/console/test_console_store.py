"""The record stores (gateway.records): the in-process ring and the capped Redis stream (real Redis, a
private prefix) keep the newest records up to their cap, find one by id, and page newest first with
filters, reading at most the scan budget per page.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis

from gateway.records.store import RecordFilter, RecordStore, RingStore
from gateway.records.stream_store import StreamStore
from gateway.redis.batch import RedisBatcher
from tests.support.shared_redis import REDIS_URL


def record(n: int) -> dict[str, Any]:
    """Record ``n``: tiers alternate, every third escalated (two reasons on every sixth)."""
    escalated = n % 3 == 0
    return {
        "id": f"req{n:06d}",
        "time": 1_800_000_000 + n,
        "tier": "fast" if n % 2 else "best",
        "key_id": f"key{n % 4}",
        "outcome": "escalated" if escalated else "accepted",
        "reason": ("low_score,upstream_error" if n % 6 == 0 else "low_score") if escalated else "none",
    }


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest, keys: Any) -> AsyncIterator[Any]:
    """A store of each kind with a cap of 200 (the Redis one under the test's prefix)."""
    if request.param == "memory":
        yield RingStore(200)
        return
    client = aioredis.from_url(REDIS_URL, decode_responses=True)
    try:
        yield StreamStore(RedisBatcher(client, 5.0), client, keys, 200)
    finally:
        await client.aclose()


async def fill(store: RecordStore, count: int) -> None:
    """Write records 0..count-1 and wait until the last one can be read."""
    for n in range(count):
        data = record(n)
        store.write(data["id"], data, orjson.dumps(data))
    # The Redis writes are queued in the batcher: one read after them waits for their pipeline.
    if isinstance(store, StreamStore):
        await store._batcher.execute("PING")


async def test_the_newest_records_up_to_the_cap_are_kept_and_found_by_id(store: Any) -> None:
    await fill(store, 1000)
    assert await store.get("req000999") == record(999)
    assert await store.get("req000500") is None  # far older than the cap: gone
    assert await store.get("no-such-id") is None
    kept = await store.count()
    assert 200 <= kept < 1000  # the stream trims approximately (MAXLEN ~), the ring exactly
    if isinstance(store, RingStore):
        assert kept == 200


async def test_a_page_is_newest_first_and_the_cursor_continues_it(store: Any) -> None:
    await fill(store, 300)
    first = await store.page(RecordFilter(), None, 50)
    assert [r["id"] for r in first.records] == [f"req{n:06d}" for n in range(299, 249, -1)]
    assert first.next_cursor is not None
    second = await store.page(RecordFilter(), first.next_cursor, 50)
    assert [r["id"] for r in second.records] == [f"req{n:06d}" for n in range(249, 199, -1)]


async def test_filters_match_tier_key_outcome_and_one_of_the_reasons(store: Any) -> None:
    await fill(store, 300)
    where = RecordFilter(tier="best", outcome="escalated", reason="upstream_error")
    page = await store.page(where, None, 10)
    assert [r["id"] for r in page.records] == [f"req{n:06d}" for n in range(294, 233, -6)][:10]
    keyed = await store.page(RecordFilter(key_id="key1"), None, 5)
    assert all(r["key_id"] == "key1" for r in keyed.records) and len(keyed.records) == 5


async def test_a_rare_filter_stops_at_the_scan_budget_and_says_where(store: Any) -> None:
    await fill(store, 300)
    page = await store.page(RecordFilter(tier="none-such"), None, 10, scan_budget=40)
    assert page.records == [] and page.scanned == 40 and page.next_cursor is not None
    rest = await store.page(RecordFilter(tier="none-such"), page.next_cursor, 10, scan_budget=40)
    assert rest.scanned == 40  # went on from there
