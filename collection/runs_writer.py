"""The runs table written by ``cascade collect``: JSONL, one row per (query, model), appended.

Columns as in docs/contracts.md#runs-table. ``read_rows`` also reads the per-request results of
``cascade replay``.

Appending row by row makes a run resumable: rows already in the file are skipped on the next start
(``done_pairs``); a torn last line from an interrupted write is ignored and overwritten.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class RunsFileError(Exception):
    """The output file cannot be used; one-line message."""


def done_pairs(path: Path) -> set[tuple[str, str]]:
    """(query_id, model) pairs already recorded in ``path`` (empty if it does not exist).

    A last line that is not valid JSON (interrupted write) is truncated away; an invalid line
    elsewhere is an error naming it.
    """
    return {(str(row["query_id"]), str(row["model"])) for row in read_rows(path, ("query_id", "model"))}


def read_rows(path: Path, required: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Rows of an appended JSONL file (empty if it does not exist), each holding ``required`` keys.

    A last line that is not a valid row (interrupted write) is truncated away; an invalid line
    elsewhere is an error naming it.
    """
    if not path.exists():
        return []
    if path.name.endswith(".gz"):
        raise RunsFileError(f"{path}: cannot append to a gzip file; collect to .jsonl and gzip it afterwards")
    data = path.read_bytes()
    lines = data.split(b"\n")
    rows: list[dict[str, Any]] = []
    good_length = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            good_length += len(line) + 1
            continue
        try:
            row = json.loads(line)
            missing = [key for key in required if key not in row]
            if missing:
                raise KeyError(", ".join(missing))
        except (ValueError, KeyError, TypeError) as exc:
            if number == len(lines) or (number == len(lines) - 1 and not lines[-1].strip()):
                with path.open("r+b") as handle:  # torn tail from an interrupted run
                    handle.truncate(good_length)
                break
            raise RunsFileError(
                f"{path}:{number}: not a row of this file ({type(exc).__name__}: {exc})"
            ) from exc
        rows.append(row)
        good_length += len(line) + 1
    return rows


class RunsWriter:
    """Appends rows to a JSONL runs file, flushed one by one."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.stat().st_size and not path.read_bytes().endswith(b"\n"):
            with path.open("ab") as handle:
                handle.write(b"\n")
        self._handle = path.open("a", encoding="utf-8")

    def write(self, row: dict[str, Any]) -> None:
        self._handle.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> RunsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
