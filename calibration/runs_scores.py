"""The confidence score of each row of a runs file: a score column, a logprob or a black-box scorer.

``row_scores`` gives per row the score and whether it is missing (a query with a missing score is
dropped whole by ``calibration.runs.load_runs``): from a ``score_column`` (scorer ``external``), from
the ``logprobs`` column with ``policies.scorers.score_logprobs`` (the gateway's own function), or
from the recorded extra calls of a black-box scorer (``calibration.blackbox_scores``). Under a
``prefix`` commit rule (``policies.commit``) a logprob scorer scores each answer's prefix only, as the
gateway scores a streamed cheap stage.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from calibration.blackbox_scores import (
    CALLS_COLUMN,
    RESPONSE_COLUMN,
    BlackboxOptions,
    BlackboxScores,
    BlackboxScoresError,
    blackbox_scores,
)
from calibration.runs_columns import LOGPROBS_COLUMN, RunsColumns, RunsError
from policies.commit import CommitRule, prefix_length
from policies.scorers import BLACKBOX_SCORERS

DEFAULT_SCORER = "mean_token_negentropy"
DEFAULT_TOP_K = 15


@dataclass(frozen=True)
class RowScores:
    """Per row: ``score`` and ``missing`` (r,); the scorer's name and top-K (None: ``external`` or
    fixed by recorded calls); a black-box scorer's recorded scores (their costs and settings).
    Under a prefix rule, per row: ``prefix_read`` the prefix's tokens and ``prefix_continues``
    whether the answer goes on past it (else None)."""

    score: np.ndarray
    missing: np.ndarray
    scorer: str
    top_k: int | None
    blackbox: BlackboxScores | None = None
    prefix_read: np.ndarray | None = None
    prefix_continues: np.ndarray | None = None


def row_scores(
    table: RunsColumns,
    score_column: str | None,
    scorer: str | None,
    top_k: int | None,
    score_tokens: str,
    blackbox: BlackboxOptions,
    prefix: CommitRule | None = None,
) -> RowScores:
    """The score of every row of ``table`` (see the module docstring); RunsError when there is none.

    ``prefix``: a ``prefix`` commit rule whose prefix a logprob scorer scores (None: whole answers).
    """
    if score_column is not None:
        table.require_column(score_column, "score column")
        values, missing = table.numeric(score_column, allow_missing=True)
        return RowScores(values, missing, "external", None)
    if scorer in BLACKBOX_SCORERS:
        return _scores_from_calls(table, scorer, top_k, blackbox)
    if LOGPROBS_COLUMN not in table.columns.values:
        candidates = [c for c in table.columns.names if c.startswith("score")]
        hint = f" (maybe one of: {', '.join(candidates)})" if candidates else ""
        raise RunsError(
            f"{table.path}: no score: pass --score-column NAME{hint}, or provide a "
            f"'{LOGPROBS_COLUMN}' column to compute a scorer from"
        )
    name = scorer or DEFAULT_SCORER
    k = DEFAULT_TOP_K if top_k is None else top_k
    scores, missing, read, continues = _scores_from_logprobs(table, name, k, score_tokens, prefix)
    if prefix is None:
        return RowScores(scores, missing, name, k)
    return RowScores(scores, missing, name, k, prefix_read=read, prefix_continues=continues)


def _scores_from_calls(
    table: RunsColumns, scorer: str, top_k: int | None, options: BlackboxOptions
) -> RowScores:
    """A black-box scorer's scores from the recorded calls (``calibration.blackbox_scores``)."""
    if top_k is not None:
        raise RunsError(f"--top-k does not apply to scorer {scorer} (the recorded calls fix it)")
    table.require_column(CALLS_COLUMN, f"column of recorded calls for scorer {scorer}")
    responses = table.columns.values.get(RESPONSE_COLUMN)
    try:
        found = blackbox_scores(
            scorer,
            table.columns.values[CALLS_COLUMN],
            table.columns.missing[CALLS_COLUMN],
            responses,
            np.asarray(table.columns.values["model"]).astype(str),
            options,
        )
    except BlackboxScoresError as exc:
        raise table.fail(str(exc), exc.position, CALLS_COLUMN) from None
    missing = ~np.isfinite(found.score) & ~found.unscored_rows
    return RowScores(found.score, missing, scorer, found.top_k, found)


def _scores_from_logprobs(
    table: RunsColumns, scorer: str, top_k: int, score_tokens: str, prefix: CommitRule | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(scores, missing, prefix tokens read, answer continues past the prefix), each (r,)."""
    import orjson

    from policies.errors import UnknownScorerError
    from policies.scorers import score_logprobs

    raw = table.columns.values[LOGPROBS_COLUMN]
    absent = table.columns.missing[LOGPROBS_COLUMN]
    scores = np.full(raw.shape[0], np.nan)
    read = np.zeros(raw.shape[0], dtype=np.int64)
    continues = np.zeros(raw.shape[0], dtype=bool)
    for position in np.flatnonzero(~absent):
        content = raw[position]
        if isinstance(content, str | bytes):
            try:
                content = orjson.loads(content)
            except orjson.JSONDecodeError:
                raise table.fail("not valid JSON", int(position), LOGPROBS_COLUMN) from None
        if isinstance(content, Mapping):  # a whole `logprobs` object rather than its `content`
            content = content.get("content")
        if content is not None and not isinstance(content, list):
            raise table.fail(
                "expected the logprobs.content list (JSON array)", int(position), LOGPROBS_COLUMN
            )
        if prefix is not None and content is not None:
            assert prefix.tokens is not None  # a prefix rule has tokens (CommitRule)
            length = prefix_length(content, prefix.tokens, prefix.boundary)
            read[position] = length
            continues[position] = length < len(_streamed_entries(content))
            content = content[:length]
        try:
            value = score_logprobs(content, scorer, top_k, score_tokens)
        except UnknownScorerError as exc:
            raise RunsError(str(exc)) from None
        if value is not None:
            scores[position] = value
    missing = ~np.isfinite(scores)
    return scores, missing, read, continues


def _streamed_entries(content: list[Any]) -> list[Any]:
    """The entries a stream delivers: without the trailing end-of-text entries a non-streamed
    llama.cpp answer may carry (``policies.token_scores``)."""
    entries = list(content)
    while (
        entries
        and isinstance(entries[-1], Mapping)
        and entries[-1].get("token") == ""
        and not entries[-1].get("bytes")
    ):
        entries.pop()
    return entries
