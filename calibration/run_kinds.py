"""The ``kind`` column of a runs table (docs/contracts.md#runs-table): which request kind a row is.

A row's kind is ``text``, ``tool_call`` or ``structured_output`` (``policies.tool_calls.request_kind``
of the prompt, recorded by ``cascade collect``); a missing column or empty cell is ``text``, so a
runs table written before the column existed is all text. Calibration reads each kind's rows as a
runs table of its own (``calibration.policy.kinds``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from calibration.table_io import Columns, TableReadError, read_columns
from policies.tool_calls import REQUEST_KINDS

KIND_COLUMN = "kind"
DEFAULT_KIND = "text"


class RunKindError(ValueError):
    """A ``kind`` cell that is not a request kind (one line naming file, row and value)."""


def row_kinds(columns: Columns, source: str | Path) -> np.ndarray:
    """``(r,)`` str: the kind of each row, ``text`` where the column or the cell is missing."""
    if KIND_COLUMN not in columns.values:
        return np.full(columns.rows.shape[0], DEFAULT_KIND, dtype=object)
    values = np.asarray(columns.values[KIND_COLUMN], dtype=object).copy()
    values[columns.missing[KIND_COLUMN]] = DEFAULT_KIND
    kinds = values.astype(str)
    unknown = np.flatnonzero(~np.isin(kinds, REQUEST_KINDS))
    if unknown.size:
        first = int(unknown[0])
        raise RunKindError(
            f"{source}: row {int(columns.rows[first])}: column '{KIND_COLUMN}': unknown kind "
            f"{str(kinds[first])!r} (one of {', '.join(REQUEST_KINDS)})"
        )
    return kinds


def rows_of_kind(columns: Columns, kind: str, source: str | Path) -> Columns:
    """The same columns restricted to the rows of ``kind``."""
    keep = row_kinds(columns, source) == kind
    return Columns(
        names=columns.names,
        values={name: values[keep] for name, values in columns.values.items()},
        missing={name: missing[keep] for name, missing in columns.missing.items()},
        rows=columns.rows[keep],
    )


def kinds_in(path: Path, where: Mapping[str, str] | None = None) -> list[str]:
    """The kinds a runs file has rows of (after ``where``), in ``REQUEST_KINDS`` order.

    Raises ``TableReadError`` for an unreadable file and ``RunKindError`` for an unknown kind.
    """
    columns = read_columns(path, {KIND_COLUMN}, dict(where or {}))
    present = set(row_kinds(columns, path))
    return [kind for kind in REQUEST_KINDS if kind in present]


__all__ = [
    "DEFAULT_KIND",
    "KIND_COLUMN",
    "RunKindError",
    "TableReadError",
    "kinds_in",
    "row_kinds",
    "rows_of_kind",
]
