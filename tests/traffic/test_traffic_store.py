"""Both store backends against the same behaviour: round trip, batches, concurrency, retention, faults."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rows_factory import query_rows

from traffic.backends import open_store
from traffic.rows import TrafficRow, json_bytes
from traffic.store import StoreError, StoreUnavailableError, TrafficStore, parse_since


async def test_rows_round_trip_with_every_column(store_url: str) -> None:
    store = open_store(store_url)
    assert isinstance(store, TrafficStore)
    route = {
        "features": "cheap-v1",
        "values": [0.0, 0.5, 1.25],
        "mechanism": "routed",
        "router_probability": 0.75,
        "models": ["small"],
    }
    rows = query_rows(
        "q1", correct={"small": 0.25}, prompt="What is 2+2?", response="4", dataset="math", route=route
    )
    try:
        assert await store.write_rows(rows) == 2
        back = await store.export()
    finally:
        await store.close()
    assert back == rows


async def test_a_batch_of_many_rows_is_written_at_once_and_duplicates_are_skipped(store_url: str) -> None:
    store = open_store(store_url)
    batch = [row for q in range(250) for row in query_rows(f"q{q}")]
    try:
        assert await store.write_rows(batch) == 500
        assert await store.write_rows(batch[:10]) == 0  # a retried batch adds nothing
        assert len(await store.export()) == 500
    finally:
        await store.close()


async def test_concurrent_writers_lose_no_row(store_url: str) -> None:
    # Eight writers, as eight replicas would be: separate store objects, one shared backend.
    stores = [open_store(store_url) for _ in range(8)]
    try:
        await asyncio.gather(
            *(
                store.write_rows([row for q in range(20) for row in query_rows(f"w{w}-q{q}", replica=None)])
                for w, store in enumerate(stores)
            )
        )
        rows = await stores[0].export()
    finally:
        for store in stores:
            await store.close()
    assert len(rows) == 8 * 20 * 2
    assert len({(r.query_id, r.model) for r in rows}) == len(rows)


def test_file_store_writers_in_threads_never_interleave_lines(file_url: str) -> None:
    def write(worker: int) -> None:
        store = open_store(file_url)
        for q in range(30):
            asyncio.run(store.write_rows(query_rows(f"t{worker}-q{q}", prompt="x" * 5000)))

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rows = asyncio.run(open_store(file_url).export())
    assert len(rows) == 4 * 30 * 2


async def test_export_filters_by_time_and_columns(store_url: str) -> None:
    now = datetime.now(UTC)
    store = open_store(store_url)
    try:
        await store.write_rows(
            query_rows("old", when=now - timedelta(days=10))
            + query_rows("new-a", when=now - timedelta(hours=1), dataset="a")
            + query_rows("new-b", when=now - timedelta(hours=2), dataset="b")
        )
        recent = await store.export(since=now - timedelta(days=7))
        only_a = await store.export(since=now - timedelta(days=7), where={"dataset": "a", "model": "small"})
    finally:
        await store.close()
    assert {r.query_id for r in recent} == {"new-a", "new-b"}
    assert [(r.query_id, r.model) for r in only_a] == [("new-a", "small")]


async def test_filtering_on_an_unknown_column_is_an_error(store_url: str) -> None:
    store = open_store(store_url)
    with pytest.raises(StoreError, match="cannot filter on 'prompt'"):
        await store.export(where={"prompt": "x"})
    await store.close()


async def test_purge_deletes_only_rows_older_than_the_horizon(store_url: str) -> None:
    now = datetime.now(UTC)
    store = open_store(store_url)
    try:
        await store.write_rows(query_rows("old", when=now - timedelta(days=31)) + query_rows("new", when=now))
        assert await store.purge(now - timedelta(days=30)) == 2
        assert await store.purge(now - timedelta(days=30)) == 0
        assert {r.query_id for r in await store.export()} == {"new"}
    finally:
        await store.close()


async def test_file_stores_sharing_a_file_skip_each_others_rows_and_a_purged_row_can_return(
    file_url: str,
) -> None:
    first, second = open_store(file_url), open_store(file_url)
    now = datetime.now(UTC)
    assert await first.write_rows(query_rows("q1", when=now - timedelta(days=40))) == 2
    assert await second.write_rows(query_rows("q1") + query_rows("q2")) == 2  # only q2 is new
    assert await first.write_rows(query_rows("q2") + query_rows("q3")) == 2  # it sees second's q2
    assert await second.purge(now - timedelta(days=30)) == 2  # q1 goes (the file is replaced)
    assert await first.write_rows(query_rows("q1")) == 2  # and may be written again
    assert sorted({r.query_id for r in await second.export()}) == ["q1", "q2", "q3"]


async def test_a_file_store_write_reads_only_what_was_appended_since_its_last_write(tmp_path: Path) -> None:
    # Its index of stored keys covers the file up to its last write; earlier bytes are not read
    # again (a growing file would make every write slower). Rewriting an early line in place, same
    # length and file, shows it: the store still knows the key that line held.
    path = tmp_path / "traffic.jsonl"
    store = open_store(f"file://{path}")
    await store.write_rows(query_rows("q1"))
    path.write_bytes(path.read_bytes().replace(b'"query_id":"q1"', b'"query_id":"q9"'))
    assert await store.write_rows(query_rows("q1")) == 0
    assert await open_store(f"file://{path}").write_rows(query_rows("q1")) == 2  # a new store reads it all


async def test_postgres_down_is_a_clear_unavailable_error_and_names_the_store() -> None:
    store = open_store("postgresql://postgres:secret@127.0.0.1:1/test?connect_timeout=2")
    with pytest.raises(
        StoreUnavailableError, match=r"traffic store postgresql://postgres:\*\*\*@127.0.0.1:1/test"
    ):
        await store.write_rows(query_rows("q"))
    await store.close()


async def test_file_store_on_an_unusable_path_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    store = open_store(f"file://{tmp_path / 'a-file' / 'traffic.jsonl'}")
    with pytest.raises(StoreUnavailableError, match="a-file"):
        await store.write_rows(query_rows("q"))


async def test_postgres_store_recovers_when_the_server_comes_back(postgres_url: str) -> None:
    # A TCP relay stands for the network path to PostgreSQL: closed = down, open = back.
    relay = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = relay.sockets[0].getsockname()[1]
    relay.close()
    await relay.wait_closed()
    url = postgres_url.replace("127.0.0.1:5432", f"127.0.0.1:{port}") + "&connect_timeout=2"
    store = open_store(url)
    with pytest.raises(StoreUnavailableError):
        await store.write_rows(query_rows("down"))

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", 5432)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True)

    relay = await asyncio.start_server(forward, "127.0.0.1", port)
    try:
        assert await store.write_rows(query_rows("back")) == 2
        assert {r.query_id for r in await store.export()} == {"back"}
    finally:
        await store.close()
        relay.close()


def test_store_url_selects_the_backend() -> None:
    assert type(open_store("file:///tmp/x.jsonl")).__name__ == "FileStore"
    assert type(open_store("postgresql://u@h/db")).__name__ == "PostgresStore"
    with pytest.raises(StoreError, match="unknown traffic store URL"):
        open_store("redis://localhost:6379/0")


def test_since_accepts_durations_and_dates() -> None:
    now = datetime(2026, 1, 10, tzinfo=UTC)
    assert parse_since("7d", now) == datetime(2026, 1, 3, tzinfo=UTC)
    assert parse_since("12h", now) == datetime(2026, 1, 9, 12, tzinfo=UTC)
    assert parse_since("2026-01-01", now) == datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(StoreError, match="--since 'soon'"):
        parse_since("soon", now)


def test_a_row_refuses_a_label_outside_0_1() -> None:
    with pytest.raises(ValueError, match="outside"):
        TrafficRow(query_id="q", model="m", correct=1.5)


async def test_unicode_stays_text_and_a_non_finite_score_is_stored_as_missing(store_url: str) -> None:
    store = open_store(store_url)
    (row,) = query_rows("q-ü", models=("small",))
    token = [{"token": "日本", "logprob": -0.5, "bytes": [230]}]
    odd = TrafficRow(**{**vars(row), "score": float("nan"), "logprobs": token})
    try:
        assert await store.write_rows([odd]) == 1
        (back,) = await store.export()
    finally:
        await store.close()
    assert back.query_id == "q-ü" and back.logprobs == odd.logprobs
    assert odd.score is None and back.score is None  # a NaN score is no score, in every store


def test_a_value_orjson_refuses_still_encodes() -> None:
    huge = 2**70  # past 64 bits: orjson refuses it, the standard library does not
    assert json_bytes({"n": huge, "t": "é"}) == '{"n":1180591620717411303424,"t":"é"}'.encode()
