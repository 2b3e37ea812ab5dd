"""Reading a runs file (CSV, CSV.gz, Parquet, JSONL) into filtered columns with null masks.

Kept apart from ``runs`` so that module only deals with meaning (validation, cost, score, the
query x model matrix). Every column comes back as a numpy array plus a boolean "missing" mask
(empty CSV cell, Parquet null, JSON null), so that a missing value and a literal ``NaN`` can be
told apart: the first is dropped with a warning for scores, the second is an error.
"""

from __future__ import annotations

import functools
import gzip
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np


class TableReadError(Exception):
    """The file cannot be read as a table (one-line message)."""


@dataclass(frozen=True)
class Columns:
    """Filtered columns of a runs file.

    Attributes:
        names: every column name the file has (before selection).
        values: selected column name -> (r,) array (object for text, float for numbers).
        missing: selected column name -> (r,) bool, True where the cell is empty / null.
        rows: (r,) 1-based record number in the file of each kept row (CSV: line = row + 1).
    """

    names: tuple[str, ...]
    values: dict[str, np.ndarray]
    missing: dict[str, np.ndarray]
    rows: np.ndarray


def file_format(path: Path) -> str:
    """'csv', 'parquet' or 'jsonl' from the file name; TableReadError for anything else."""
    name = path.name.lower()
    if name.endswith((".csv", ".csv.gz")):
        return "csv"
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith((".jsonl", ".jsonl.gz", ".ndjson")):
        return "jsonl"
    raise TableReadError(f"{path}: unknown runs format (use .csv, .csv.gz, .parquet or .jsonl)")


def read_columns(path: Path, wanted: Iterable[str], where: Mapping[str, str]) -> Columns:
    """Read the ``wanted`` columns that exist, keeping rows where every ``where`` column equals its value.

    ``where`` values are compared as text (``--where dataset=mmlu``). A ``where`` column the file
    lacks is an error; missing ``wanted`` columns are simply absent from the result.
    """
    kind = file_format(path)
    if not path.is_file():
        raise TableReadError(f"{path}: no such file")
    try:
        if kind == "jsonl":
            return _read_jsonl(path, set(wanted), where)
        return _read_arrow(path, kind, set(wanted), where)
    except TableReadError:
        raise
    except (OSError, ValueError, EOFError) as exc:
        raise TableReadError(f"{path}: cannot read as {kind} ({_one_line(exc)})") from exc
    except Exception as exc:  # pyarrow raises its own ArrowInvalid etc.; keep the message, drop the trace
        raise TableReadError(f"{path}: cannot read as {kind} ({_one_line(exc)})") from exc


def _read_arrow(path: Path, kind: str, wanted: set[str], where: Mapping[str, str]) -> Columns:
    import pyarrow as pa
    import pyarrow.compute as pc

    if kind == "csv":
        from pyarrow import csv as pacsv

        # Every column as text so "NaN" and "abc" survive to be reported; only "" is null.
        names = _csv_header(path)
        selected = [c for c in names if c in wanted or c in where]
        table = pacsv.read_csv(
            path,
            convert_options=pacsv.ConvertOptions(
                include_columns=selected,
                column_types={c: pa.string() for c in selected},
                null_values=[""],
                strings_can_be_null=True,
            ),
        )
    else:
        import pyarrow.parquet as pq

        names = list(pq.read_schema(path).names)
        selected = [c for c in names if c in wanted or c in where]
        table = pq.read_table(path, columns=selected)
    _check_where_columns(path, names, where)
    rows = np.arange(1, table.num_rows + 1)
    if where:
        matches = []
        for column, value in where.items():
            array = table[column]
            if not pa.types.is_string(array.type) and not pa.types.is_large_string(array.type):
                array = pc.cast(array, pa.string())
            matches.append(pc.fill_null(pc.equal(array, value), False))
        mask = functools.reduce(pc.and_, matches)
        table = table.filter(mask)
        rows = rows[np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)]
    values, missing = {}, {}
    for column in selected:
        chunked = table[column]
        missing[column] = np.asarray(chunked.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        values[column] = chunked.to_numpy(zero_copy_only=False)
    return Columns(tuple(names), values, missing, rows)


def _csv_header(path: Path) -> list[str]:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rt", newline="") as handle:
        import csv

        header = next(csv.reader(handle), None)
    if not header:
        raise TableReadError(f"{path}: empty file (no header row)")
    return [h.strip() for h in header]


def _read_jsonl(path: Path, wanted: set[str], where: Mapping[str, str]) -> Columns:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    records: list[dict] = []
    names: dict[str, None] = {}
    with opener(path, "rt") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)  # stdlib: accepts NaN, so a literal NaN can be reported
            except json.JSONDecodeError as exc:
                raise TableReadError(f"{path}: line {number}: not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise TableReadError(f"{path}: line {number}: expected a JSON object per line")
            record["__row__"] = number
            for key in record:
                names.setdefault(key, None)
            records.append(record)
    names.pop("__row__", None)
    _check_where_columns(path, list(names), where)
    if where:
        records = [r for r in records if all(_text(r.get(c)) == v for c, v in where.items())]
    selected = [c for c in names if c in wanted or c in where]
    values, missing = {}, {}
    for column in selected:
        column_values = [r.get(column) for r in records]
        array = np.empty(len(column_values), dtype=object)
        array[:] = column_values
        values[column] = array
        missing[column] = np.array([v is None or v == "" for v in column_values], dtype=bool)
    rows = np.array([r["__row__"] for r in records], dtype=np.int64)
    return Columns(tuple(names), values, missing, rows)


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _check_where_columns(path: Path, names: list[str], where: Mapping[str, str]) -> None:
    absent = [c for c in where if c not in names]
    if absent:
        raise TableReadError(
            f"{path}: --where column '{absent[0]}' is not in the file (columns: {', '.join(names)})"
        )


def _one_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
