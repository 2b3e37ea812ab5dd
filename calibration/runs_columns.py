"""One runs file's columns, validated cell by cell: values, flags, token counts and row costs.

Every problem becomes a ``RunsError`` whose one-line message names the file, the row (1-based
record number; in a CSV that is line row + 1) and the column. ``calibration.runs.load_runs`` reads
the columns, scores the rows (``calibration.runs_scores``) and pivots them into a ``RunsMatrix``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from calibration.blackbox_scores import CALLS_COLUMN, RESPONSE_COLUMN
from calibration.run_kinds import KIND_COLUMN
from calibration.table_io import Columns
from money import Price, PriceError
from policies.scorers import BLACKBOX_SCORERS

REQUIRED_COLUMNS = ("query_id", "model", "correct")
COST_COLUMNS = ("cost_usd", "prompt_tokens", "completion_tokens")
# Parts of the token counts (money.usage): priced at the price's part rates when present. The
# 1-hour cache writes are the part of ``cache_write_tokens`` written with the 1-hour lifetime.
PART_COLUMNS = ("cached_tokens", "cache_write_tokens", "cache_write_1h_tokens", "reasoning_tokens")
LOGPROBS_COLUMN = "logprobs"
STRATA_COLUMN = "dataset"
VALID_COLUMN = "valid"
TRUNCATED_COLUMN = "truncated"
# The bytes of each recorded request as sent (``cascade collect``): a prefix rule's cancelled call.
REQUEST_BYTES_COLUMN = "request_bytes"
# The completion cap each recorded request sent (``cascade collect``): a cancelled call's bound.
COMPLETION_CAP_COLUMN = "completion_cap"
_FALSE_TEXT = {"false", "0"}
_TRUE_TEXT = {"true", "1"}
_NAN_TEXT = {"nan", "+nan", "-nan"}


class RunsError(Exception):
    """Bad runs input; the message is one line naming the file, row and column."""


class RunsColumns:
    """The columns read from one runs file (``Columns``), with errors that name file, row and column."""

    def __init__(self, path: Path, columns: Columns, where: Mapping[str, str]):
        """``where``: the row filters the columns were read with (named when no row is left)."""
        self.path = path
        self.columns = columns
        self.where = where
        self.notes: list[str] = []

    def fail(self, message: str, position: int | None = None, column: str | None = None) -> RunsError:
        where = f"{self.path}"
        if position is not None:
            where += f": row {int(self.columns.rows[position])}"
        if column is not None:
            where += f": column '{column}'"
        return RunsError(f"{where}: {message}")

    def require_column(self, name: str, why: str = "required column") -> None:
        if name not in self.columns.values:
            raise RunsError(f"{self.path}: missing {why} '{name}' (columns: {', '.join(self.columns.names)})")

    def numeric(self, name: str, *, allow_missing: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(values float64, missing bool) of a column; errors on non-numeric / NaN / missing."""
        raw = self.columns.values[name]
        missing = self.columns.missing[name]
        if raw.dtype.kind in "fiub":
            values = raw.astype(np.float64)
        else:
            import pandas as pd

            values = pd.to_numeric(pd.Series(raw, dtype=object), errors="coerce").to_numpy(np.float64)
        bad = np.flatnonzero(~np.isfinite(values) & ~missing)
        if bad.size:
            first = int(bad[0])
            value = raw[first]
            if _is_nan_literal(value):
                raise self.fail("NaN value (leave the cell empty for a missing score)", first, name)
            if (isinstance(value, float | np.floating) and math.isinf(value)) or _is_inf_text(value):
                raise self.fail(f"infinite value {value!r}", first, name)
            raise self.fail(f"non-numeric value {value!r}", first, name)
        if not allow_missing and missing.any():
            raise self.fail("missing value", int(np.flatnonzero(missing)[0]), name)
        return values, missing

    def cost(self, model: np.ndarray, sheet: dict[str, Price] | None, sheet_path: Path | None) -> np.ndarray:
        """(r,) USD per row: from the price sheet when one is given, else the cost_usd column."""
        if sheet is None:
            if "cost_usd" not in self.columns.values:
                raise RunsError(
                    f"{self.path}: no cost: the runs have no 'cost_usd' column; pass --prices "
                    "PRICES.yaml (token prices with prompt_tokens/completion_tokens, or per_query_usd)"
                )
            values, _ = self.numeric("cost_usd")
            negative = np.flatnonzero(values < 0)
            if negative.size:
                raise self.fail("negative cost", int(negative[0]), "cost_usd")
            return values
        if "cost_usd" in self.columns.values:
            self.notes.append(f"cost from the price sheet {sheet_path}; the 'cost_usd' column is ignored")
        names, codes = np.unique(model, return_inverse=True)
        unpriced = [n for n in names if n not in sheet]
        if unpriced:
            raise RunsError(
                f"{self.path}: model '{unpriced[0]}' is not in the price sheet {sheet_path} "
                f"(it has {', '.join(sheet)})"
            )
        prompt: np.ndarray | None = None
        completion: np.ndarray | None = None
        if all(c in self.columns.values for c in ("prompt_tokens", "completion_tokens")):
            prompt, _ = self.numeric("prompt_tokens")
            completion, _ = self.numeric("completion_tokens")
        parts = self._part_counts() if prompt is not None else None
        cost = np.empty(model.shape[0], dtype=np.float64)
        for index, name in enumerate(names):  # a loop over models, not rows
            rows = codes == index
            try:  # token prices where counts are known (each part at its rate), else per_query_usd
                if prompt is None or completion is None:
                    cost[rows] = sheet[name].cost_usd(None, None)
                else:
                    known = () if parts is None else tuple(part[rows] for part in parts)
                    cost[rows] = sheet[name].parts_cost_usd(prompt[rows], completion[rows], *known)
            except PriceError:
                raise RunsError(
                    f"{self.path}: model '{name}' has only token prices in {sheet_path} but the "
                    "runs have no 'prompt_tokens'/'completion_tokens' columns"
                ) from None
        return cost

    def prefix_saving(
        self,
        model: np.ndarray,
        cost: np.ndarray,
        sheet: dict[str, Price],
        overruns: Mapping[str, int],
        read: np.ndarray,
        continues: np.ndarray,
    ) -> np.ndarray:
        """(r,) USD not charged when each row's stage escalates under a prefix rule
        (``calibration.prefix_cost``): ``read`` tokens of each prefix, ``continues`` where the answer
        goes on past it; ``overruns``: the tokens each model declares it may generate after a cancel
        (the price sheet's ``cancel_overrun_tokens``; a model absent is charged its cap)."""
        from calibration.prefix_cost import escalation_saving, sent_request_bytes

        self.require_column(
            COMPLETION_CAP_COLUMN,
            "completion-cap column (a cancelled cheap stage is charged within the cap it sent; "
            "cascade collect records it)",
        )
        caps, _ = self.numeric(COMPLETION_CAP_COLUMN)
        bad = np.flatnonzero(~np.isfinite(caps) | (caps < 1))
        if bad.size:
            raise self.fail(
                f"expected a positive cap, got {caps[bad[0]]!r}", int(bad[0]), COMPLETION_CAP_COLUMN
            )
        request_bytes = None
        if REQUEST_BYTES_COLUMN in self.columns.values:
            request_bytes, _ = self.numeric(REQUEST_BYTES_COLUMN)
        else:
            self.notes.append(
                f"no '{REQUEST_BYTES_COLUMN}' column: a cancelled cheap stage's request is estimated "
                "from its prompt tokens (calibration.prefix_cost)"
            )
        prompt = self.numeric("prompt_tokens")[0] if "prompt_tokens" in self.columns.values else None
        try:
            sent = sent_request_bytes(request_bytes, prompt, model.shape[0])
        except ValueError as exc:
            raise RunsError(f"{self.path}: {exc}") from None
        prices = [sheet[str(name)] for name in model]
        overrun = [overruns.get(str(name)) for name in model]
        return escalation_saving(cost, prices, sent, caps, overrun, read, continues)

    def strata(self, n: int, rows_q: np.ndarray, keep_rows: np.ndarray) -> np.ndarray | None:
        """(n,) the kept queries' ``dataset`` labels (``rows_q``: each kept row's query), or None."""
        if STRATA_COLUMN not in self.columns.values:
            return None
        labels = np.empty(n, dtype=object)
        labels[rows_q] = np.asarray(self.columns.values[STRATA_COLUMN], dtype=object)[keep_rows]
        return labels.astype(str)

    def check_no_duplicate(self, query: np.ndarray, model: np.ndarray, key: np.ndarray) -> None:
        """Fail on the first row repeating an earlier row's (query_id, model); ``key`` codes the pair."""
        order = np.argsort(key, kind="stable")
        repeated = np.flatnonzero(key[order][1:] == key[order][:-1])
        if repeated.size:
            first, second = int(order[repeated[0]]), int(order[repeated[0] + 1])
            raise self.fail(
                f"duplicate (query_id, model) = ('{query[second]}', '{model[second]}'), "
                f"first seen at row {int(self.columns.rows[first])}",
                second,
            )

    def _part_counts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """The parts of ``Price.parts_cost_usd`` from the ``PART_COLUMNS`` (an absent column or empty
        cell: 0): cache reads, 5-minute writes, 1-hour writes, reasoning; None when none is present."""
        present = [c for c in PART_COLUMNS if c in self.columns.values]
        if not present:
            return None
        counts = []
        for name in PART_COLUMNS:
            if name not in present:
                counts.append(np.zeros(self.columns.rows.shape[0]))
                continue
            values, missing = self.numeric(name, allow_missing=True)
            if (values[~missing] < 0).any():
                raise self.fail("negative token count", int(np.flatnonzero((values < 0) & ~missing)[0]), name)
            counts.append(np.where(missing, 0.0, values))
        read, write, write_1h, reasoning = counts
        above = np.flatnonzero(write_1h > write)
        if above.size:
            raise self.fail(
                "more 1-hour cache writes than cache writes (they are part of cache_write_tokens)",
                int(above[0]),
                "cache_write_1h_tokens",
            )
        return read, write - write_1h, write_1h, reasoning

    def flagged(self, column: str, *, flag: bool) -> np.ndarray:
        """(r,) bool: rows whose boolean ``column`` is ``flag`` (a missing column or cell is not):
        ``valid`` false (a failed check), ``truncated`` true (a cut answer)."""
        if column not in self.columns.values:
            return np.zeros(self.columns.rows.shape[0], dtype=bool)
        raw = self.columns.values[column]
        missing = self.columns.missing[column]
        found = np.zeros(raw.shape[0], dtype=bool)
        for position in np.flatnonzero(~missing):
            value = raw[position]
            if isinstance(value, bool | np.bool_):
                value = bool(value)
            text = str(value).strip().lower()
            if text not in _FALSE_TEXT | _TRUE_TEXT:
                raise self.fail(f"expected true or false, got {value!r}", int(position), column)
            found[position] = (text in _TRUE_TEXT) is flag
        return found


def wanted_columns(
    score_column: str | None, scorer: str | None, feature_columns: list[str], kind: str | None
) -> set[str]:
    """The columns a load reads (the others of the file are never parsed)."""
    wanted = {
        *REQUIRED_COLUMNS,
        *COST_COLUMNS,
        *PART_COLUMNS,
        STRATA_COLUMN,
        VALID_COLUMN,
        TRUNCATED_COLUMN,
        *feature_columns,
    }
    wanted.add(score_column if score_column is not None else LOGPROBS_COLUMN)
    if kind is not None:
        wanted.add(KIND_COLUMN)
    if scorer in BLACKBOX_SCORERS:
        wanted |= {CALLS_COLUMN, RESPONSE_COLUMN}
    return wanted


def _is_nan_literal(value: object) -> bool:
    if isinstance(value, float | np.floating):
        return math.isnan(value)
    return isinstance(value, str) and value.strip().lower() in _NAN_TEXT


def _is_inf_text(value: object) -> bool:
    return isinstance(value, str) and value.strip().lower().lstrip("+-") in {"inf", "infinity"}
