"""The JSONL file store reads only regular files, and never more than a bounded amount at once."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest
from rows_factory import query_rows

from traffic.backends import open_store
from traffic.file_store import FileStore
from traffic.store import StoreError


def test_a_device_fifo_or_directory_is_refused_when_the_store_is_made(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    for path, kind in [
        ("/dev/zero", "a character device"),
        (tmp_path / "fifo", "a FIFO"),
        (tmp_path, "a directory"),
    ]:
        with pytest.raises(StoreError, match=f"is {kind}, not a regular file"):
            open_store(f"file://{path}")


async def test_a_path_swapped_for_an_endless_device_later_is_refused_not_read(tmp_path: Path) -> None:
    path = tmp_path / "traffic.jsonl"
    store = open_store(f"file://{path}")
    assert await store.write_rows(query_rows("q1")) == 2
    path.unlink()
    path.symlink_to("/dev/zero")  # reading it would never end
    with pytest.raises(StoreError, match="is a character device"):
        await store.write_rows(query_rows("q2"))
    with pytest.raises(StoreError, match="is a character device"):
        await store.export()


async def test_indexing_a_large_file_holds_a_chunk_not_the_file(tmp_path: Path) -> None:
    path = tmp_path / "traffic.jsonl"
    writer = FileStore(path)
    await writer.write_rows([row for q in range(50) for row in query_rows(f"q{q}")])
    await writer.write_rows(query_rows("long", models=("small",), prompt="x" * (24 << 20)))  # a 24 MB line
    await writer.write_rows(query_rows("after"))
    reader = FileStore(path)  # a fresh process: indexes the whole file on its first write
    tracemalloc.start()
    try:
        again = query_rows("q7") + query_rows("long", models=("small",)) + query_rows("after")
        written = await reader.write_rows(again + query_rows("q99"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert written == 2  # only q99 is new: every key was indexed, also the long line's and those after it
    assert peak < 8 << 20, peak  # a few 1 MB chunks, not the 24 MB line
    keys = {(row.query_id, row.model) for row in await reader.export()}
    assert ("after", "small") in keys and ("q99", "large") in keys
