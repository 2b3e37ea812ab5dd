"""Traffic rows record their request kind: through both stores, in the export, and as text when an
older writer did not record it."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import asyncpg
import pytest
from rows_factory import query_rows
from typer.testing import CliRunner

from calibration.policy.kinds import load_runs_by_kind
from calibration.run_kinds import kinds_in
from cascade_cli.main import app
from tests.support.postgres import POSTGRES_URL
from tests.support.traffic_kinds import store_rows, two_kinds
from tests.support.traffic_rows import stored_rows
from traffic.backends import open_store
from traffic.migrations import MIGRATIONS
from traffic.rows import RowError, TrafficRow

runner = CliRunner()


async def test_rows_of_every_kind_round_trip_and_filter_by_kind(store_url: str) -> None:
    text = query_rows("q-text")
    tool = query_rows("q-tool", kind="tool_call")
    structured = query_rows("q-json", kind="structured_output")
    store = open_store(store_url)
    try:
        assert await store.write_rows(text + tool + structured) == 6
        back = await store.export()
        only_tool = await store.export(where={"kind": "tool_call"})
    finally:
        await store.close()
    assert back == text + tool + structured
    assert [r.kind for r in back] == ["text"] * 2 + ["tool_call"] * 2 + ["structured_output"] * 2
    assert [(r.query_id, r.model) for r in only_tool] == [("q-tool", "small"), ("q-tool", "large")]


def test_a_row_refuses_a_kind_that_is_not_a_request_kind() -> None:
    with pytest.raises(RowError, match="kind 'tools' is not a request kind"):
        TrafficRow(query_id="q", model="m", correct=1.0, kind="tools")


def test_a_file_line_written_without_kind_reads_as_text(file_url: str) -> None:
    (row,) = query_rows("old", models=("small",))
    record = row.to_record()
    del record["kind"]  # a line an earlier writer appended
    path = Path(file_url.removeprefix("file://"))
    path.write_text(
        json.dumps(record) + "\n" + json.dumps({**record, "query_id": "null", "kind": None}) + "\n"
    )
    assert [(r.query_id, r.kind) for r in stored_rows(file_url)] == [("old", "text"), ("null", "text")]


async def test_postgres_rows_stored_before_the_kind_column_read_as_text(postgres_url: str) -> None:
    # A schema at version 1 (no kind column) holding a row, as a store from before the upgrade.
    schema = postgres_url.rsplit("schema=", 1)[1]
    version_1 = dict(MIGRATIONS)[1]
    conn = await asyncpg.connect(POSTGRES_URL)
    try:
        await conn.execute(f"CREATE SCHEMA {schema}")
        await conn.execute(version_1.format(schema=schema))
        await conn.execute(
            f"CREATE TABLE {schema}.traffic_schema_version "
            "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());"
            f"INSERT INTO {schema}.traffic_schema_version (version) VALUES (1)"
        )
        await conn.execute(
            f"INSERT INTO {schema}.traffic_rows (recorded_at, query_id, model, correct) "
            "VALUES (now(), 'before', 'small', 1)"
        )
    finally:
        await conn.close()
    store = open_store(postgres_url)  # migrates to the latest version on first use
    try:
        assert await store.write_rows(query_rows("after", models=("small",), kind="tool_call")) == 1
        rows = await store.export()
        text_only = await store.export(where={"kind": "text"})
    finally:
        await store.close()
    assert [(r.query_id, r.kind) for r in rows] == [("before", "text"), ("after", "tool_call")]
    assert [r.query_id for r in text_only] == ["before"]


@pytest.mark.parametrize("suffix", ["jsonl", "csv.gz"])
def test_the_export_writes_the_kind_column_calibration_reads(
    store_url: str, tmp_path: Path, suffix: str
) -> None:
    store_rows(store_url, two_kinds(30, 20, seed=3))
    output = tmp_path / f"runs.{suffix}"
    result = runner.invoke(app, ["traffic", "export", "--store", store_url, "-o", str(output)])
    assert result.exit_code == 0, result.output
    assert "kind" in result.output.split("columns: ", 1)[1].replace(",", " ").split()
    if suffix == "jsonl":
        records = [json.loads(line) for line in output.read_text().splitlines()]
    else:
        with gzip.open(output, "rt", newline="") as handle:
            records = list(csv.DictReader(handle))
    kinds = {r["query_id"]: r["kind"] for r in records}
    assert {kinds[f"text-{q}"] for q in range(30)} == {"text"}
    assert {kinds[f"tool_call-{q}"] for q in range(20)} == {"tool_call"}
    assert kinds_in(output) == ["text", "tool_call"]
    matrices = load_runs_by_kind(output)
    assert {kind: m.n_queries for kind, m in matrices.items()} == {"text": 30, "tool_call": 20}
