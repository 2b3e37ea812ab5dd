"""Stored traffic rows -> a runs table (docs/contracts.md#runs-table) that calibration reads as is.

A runs table needs every query to have one row per model of the pool. Traffic has gaps: a shadow
call that failed, a judge that could not decide (``correct`` is None), a sample still in flight.
Such a query is *incomplete*; it is dropped (the default) or makes the export fail, never filled
with a wrong answer. The pool is the models named, or every model seen in the exported rows.
"""

from __future__ import annotations

import asyncio
import csv
import gzip
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from traffic.rows import COLUMNS, TrafficRow

if TYPE_CHECKING:
    from traffic.store import TrafficStore

JSON_COLUMNS = ("logprobs", "route")


class ExportError(Exception):
    """The export cannot be written (one-line message)."""


@dataclass(frozen=True)
class Selection:
    """The complete queries of an export and what was left out."""

    rows: list[TrafficRow]
    models: tuple[str, ...]
    queries: int
    incomplete: dict[str, list[str]] = field(default_factory=dict)  # query_id -> models without a label
    outside_pool: int = 0  # rows of models not in the pool

    def most_lacking(self) -> str:
        """Which pool model lacks a labelled row in the most queries, as text ('' when none lacks)."""
        counts = Counter(model for lacking in self.incomplete.values() for model in lacking)
        if not counts:
            return ""
        model, count = counts.most_common(1)[0]
        return f"'{model}' lacks a labelled row in {count} of {self.queries + len(self.incomplete)} queries"


def select_complete(rows: Iterable[TrafficRow], models: Sequence[str] | None = None) -> Selection:
    """Keep the queries that have a labelled row for every pool model; the first row of a pair wins."""
    by_query: dict[str, dict[str, TrafficRow]] = {}
    seen_models: dict[str, None] = {}
    for row in rows:
        seen_models.setdefault(row.model, None)
        by_query.setdefault(row.query_id, {}).setdefault(row.model, row)
    pool = tuple(models) if models else tuple(sorted(seen_models))
    kept: list[TrafficRow] = []
    incomplete: dict[str, list[str]] = {}
    outside = 0
    for query_id, answers in by_query.items():
        outside += sum(1 for m in answers if m not in pool)
        lacking = [m for m in pool if m not in answers or answers[m].correct is None]
        if lacking:
            incomplete[query_id] = lacking
        else:
            kept.extend(answers[m] for m in pool)
    return Selection(kept, pool, len(by_query) - len(incomplete), incomplete, outside)


@dataclass(frozen=True)
class StoreExport:
    """What ``export_store`` read: the complete queries and one note per thing left out."""

    selection: Selection
    notes: list[str]


def export_store(
    url: str,
    *,
    since: str | None = None,
    where: dict[str, str] | None = None,
    models: Sequence[str] | None = None,
    incomplete: Literal["drop", "error"] = "drop",
) -> StoreExport:
    """Read a store's rows and keep the complete queries (``cascade traffic export`` without the write).

    Raises ``StoreError`` (bad URL or filter, store unreachable) or ``ExportError`` (no rows, no
    complete query, or an incomplete one with ``incomplete="error"``), each with a one-line message.
    """
    from traffic.backends import open_store
    from traffic.store import parse_since

    filters = dict(where or {})
    start = parse_since(since) if since else None
    rows = asyncio.run(_read_store(open_store(url), start, filters))
    if not rows:
        described = "".join(f" --where {c}={v}" for c, v in filters.items())
        raise ExportError(f"no traffic rows in {url}" + (f" since {since}" if since else "") + described)
    selection = select_complete(rows, models)
    notes = []
    if selection.incomplete:
        lacking = sum(len(m) for m in selection.incomplete.values())
        first, missing = next(iter(selection.incomplete.items()))
        count = len(selection.incomplete)
        message = (
            f"{count} incomplete quer{'y' if count == 1 else 'ies'} "
            f"({lacking} missing labelled rows; e.g. '{first}' lacks {', '.join(missing)})"
        )
        if incomplete == "error":
            raise ExportError(message + "; use --incomplete drop to leave them out")
        notes.append(f"dropped {message}")
    if selection.outside_pool:
        notes.append(f"{selection.outside_pool} rows of models outside --models left out")
    if not selection.rows:
        raise ExportError(
            f"no complete query: every query lacks a labelled row for some of {', '.join(selection.models)}"
            f" ({selection.most_lacking()})"
        )
    return StoreExport(selection, notes)


async def _read_store(store: TrafficStore, since: datetime | None, where: dict[str, str]) -> list[TrafficRow]:
    try:
        return await store.export(since, where)
    finally:
        await store.close()


def write_runs(rows: Sequence[TrafficRow], path: Path) -> list[str]:
    """Write ``rows`` as a runs table (.jsonl[.gz], .csv[.gz], .parquet); returns the columns written.

    Columns that are empty in every row (e.g. ``prompt`` without ``log_text``) are left out.
    """
    records = [row.to_record() for row in rows]
    columns = [c for c in COLUMNS if any(r[c] is not None for r in records)]
    name = path.name.lower()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if name.endswith((".jsonl", ".jsonl.gz", ".ndjson")):
            _write_jsonl(records, columns, path)
        elif name.endswith((".csv", ".csv.gz")):
            _write_csv(records, columns, path)
        elif name.endswith((".parquet", ".pq")):
            _write_parquet(records, columns, path)
        else:
            raise ExportError(f"{path}: unknown runs format (use .jsonl, .csv, .csv.gz or .parquet)")
    except OSError as exc:
        raise ExportError(f"{path}: {exc.strerror or exc}") from exc
    return columns


def _open_text(path: Path) -> Any:
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, "wt", encoding="utf-8", newline="")
    return open(path, "w", encoding="utf-8", newline="")


def _write_jsonl(records: list[dict[str, Any]], columns: list[str], path: Path) -> None:
    with _open_text(path) as handle:
        for record in records:
            handle.write(json.dumps({c: record[c] for c in columns}, ensure_ascii=False) + "\n")


def _write_csv(records: list[dict[str, Any]], columns: list[str], path: Path) -> None:
    with _open_text(path) as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for record in records:
            writer.writerow([_cell(c, record[c]) for c in columns])


def _cell(column: str, value: Any) -> Any:
    if value is None:
        return ""
    if column in JSON_COLUMNS:
        return json.dumps(value, separators=(",", ":"))
    return value


def _write_parquet(records: list[dict[str, Any]], columns: list[str], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = {
        c: [_cell(c, r[c]) if c in JSON_COLUMNS and r[c] is not None else r[c] for r in records]
        for c in columns
    }
    pq.write_table(pa.table(data), path)
