"""The runs table (docs/contracts.md#runs-table) as a query x model matrix of quality, cost and score.

``load_runs`` reads CSV / CSV.gz / Parquet / JSONL, validates it row by row and pivots it into a
``RunsMatrix``. A row whose answer failed the structural checks (``valid`` false, recorded by
``cascade collect``) gets the score ``-inf`` whatever its logprobs say, and so does a row whose
answer was cut at a completion cap the request did not set (``truncated`` true,
``policies.truncation``): the gateway escalates such an answer whatever its score, so no threshold
may accept it (``calibration.frontier`` only ever chooses finite thresholds). Every input
problem becomes a ``RunsError`` whose one-line message names the file, the row (1-based record
number; in a CSV that is line row + 1) and the column (``calibration.runs_columns``: the columns and
costs; ``calibration.runs_scores``: the scores).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from calibration.blackbox_scores import BlackboxOptions, BlackboxScores
from calibration.run_kinds import RunKindError, rows_of_kind
from calibration.runs_columns import (
    COMPLETION_CAP_COLUMN,
    LOGPROBS_COLUMN,
    REQUEST_BYTES_COLUMN,
    REQUIRED_COLUMNS,
    TRUNCATED_COLUMN,
    VALID_COLUMN,
    RunsColumns,
    RunsError,
    wanted_columns,
)
from calibration.runs_scores import RowScores, row_scores
from calibration.table_io import Columns, TableReadError, read_columns
from money import Price
from money.price_sheet import PriceSheetError, load_cancel_overruns, load_price_sheet
from policies.call_tokens import SCORE_TOKENS
from policies.commit import CommitRule
from policies.scorers import BLACKBOX_SCORERS


@dataclass(frozen=True)
class RunsMatrix:
    """Per-query results of k models on the same n queries.

    Attributes:
        models: k model names, ordered by mean cost ascending (ties: by name).
        query_ids: (n,) str.
        quality: (n, k) float64 in [0, 1].
        cost: (n, k) float64, USD per query.
        score: (n, k) float64 confidence (higher = more confident).
        strata: (n,) labels for stratified splits (the ``dataset`` column) or None.
        features: (n, d) float64 per-query features or None.
        source: where the runs came from (file path), for messages and reports.
        scorer: scorer name that produced ``score`` (``external`` for a precomputed column).
        top_k: top-K used by the scorer (None for ``external``).
        score_tokens: the positions the scorer read (``ScorerSpec.tokens``: ``all`` or ``call_values``).
        score_column: the precomputed score column used, if any.
        notes: warnings raised while loading (e.g. dropped queries), for the CLI to show.
        scoring_cost: (n, k) USD of scoring each model's answer with a black-box scorer (its
            recorded extra calls), paid where the model is a scored stage; None for logprob scores.
        unscored: models without recorded calls for the black-box scorer: never a scored stage.
        scorer_settings: the black-box scorer's policy fields (``policies.schema.ScorerSpec``).
        escalation_saving: (n, k) USD of each model's call not charged when that model, as a
            cascade stage, escalates (a ``prefix`` commit rule cancels it after its prefix,
            ``calibration.prefix_cost``); negative when the cancelled call is charged more than
            its whole answer cost. None: a stage that escalates pays its whole call.
        commit: the commit rule the scores were computed under (``policies.commit``); None: buffer.
        answer_features: per model, (n, d) the ``policies.benefit.FEATURES`` of its answers (NaN
            rows: no usable logprobs), for ``cascade calibrate --benefit-scorer``; None: not read.
    """

    models: tuple[str, ...]
    query_ids: np.ndarray
    quality: np.ndarray
    cost: np.ndarray
    score: np.ndarray
    strata: np.ndarray | None = None
    features: np.ndarray | None = None
    source: str = ""
    scorer: str = "external"
    top_k: int | None = None
    score_column: str | None = None
    score_tokens: str = "all"
    notes: tuple[str, ...] = field(default=())
    scoring_cost: np.ndarray | None = None
    unscored: tuple[str, ...] = ()
    scorer_settings: Mapping[str, Any] | None = None
    escalation_saving: np.ndarray | None = None
    commit: CommitRule | None = None
    answer_features: Mapping[str, np.ndarray] | None = None

    @property
    def n_queries(self) -> int:
        """Number of queries n."""
        return int(self.quality.shape[0])

    def model_index(self, name: str) -> int:
        """Column index of a model; KeyError naming the known models otherwise."""
        try:
            return self.models.index(name)
        except ValueError:
            raise KeyError(f"unknown model {name!r}; the runs have {', '.join(self.models)}") from None

    def subset(self, rows: np.ndarray) -> RunsMatrix:
        """The same models on a subset of queries (``rows``: int index array into the n queries)."""
        rows = np.asarray(rows)
        return replace(
            self,
            query_ids=self.query_ids[rows],
            quality=self.quality[rows],
            cost=self.cost[rows],
            score=self.score[rows],
            strata=None if self.strata is None else self.strata[rows],
            features=None if self.features is None else self.features[rows],
            scoring_cost=None if self.scoring_cost is None else self.scoring_cost[rows],
            escalation_saving=None if self.escalation_saving is None else self.escalation_saving[rows],
            answer_features=None
            if self.answer_features is None
            else {model: table[rows] for model, table in self.answer_features.items()},
        )

    def stage_cost(self, rows: Any, columns: Sequence[int]) -> np.ndarray:
        """(len(rows), len(columns)) cost of each model as a scored stage: its call plus scoring it."""
        cost = self.cost[rows][:, list(columns)]
        if self.scoring_cost is None:
            return cost
        return cost + self.scoring_cost[rows][:, list(columns)]

    def saving(self, rows: Any, columns: Sequence[int]) -> np.ndarray | None:
        """(len(rows), len(columns)) cost not charged when each model escalates (None: nothing saved)."""
        return None if self.escalation_saving is None else self.escalation_saving[rows][:, list(columns)]

    def scoring(self, rows: Any, columns: Sequence[int]) -> np.ndarray | None:
        """(len(rows), len(columns)) scoring cost of the models (None without a black-box scorer)."""
        return None if self.scoring_cost is None else self.scoring_cost[rows][:, list(columns)]


def load_runs(
    path: str | Path,
    *,
    prices: Path | None = None,
    score_column: str | None = None,
    scorer: str | None = None,
    top_k: int | None = None,
    where: dict[str, str] | None = None,
    feature_columns: list[str] | None = None,
    kind: str | None = None,
    blackbox: BlackboxOptions | None = None,
    score_tokens: str = "all",
    commit: CommitRule | None = None,
) -> RunsMatrix:
    """Load, validate and pivot a runs table.

    Args:
        path: runs file (.csv, .csv.gz, .parquet, .jsonl).
        prices: price-sheet YAML. When given, cost comes from it (token prices when the runs have
            ``prompt_tokens`` and ``completion_tokens`` and the model has token prices, else
            ``per_query_usd``); otherwise from the ``cost_usd`` column.
        score_column: a precomputed confidence column (scorer ``external``). Exclusive with scorer.
        scorer, top_k: compute the score from the ``logprobs`` column with
            ``policies.scorers.score_logprobs`` (defaults: mean_token_negentropy, 15).
        score_tokens: the positions that scorer reads (``ScorerSpec.tokens``): ``all`` (default) or
            ``call_values`` (a call's function name and argument values).
        where: keep only rows whose column equals the value, compared as text.
        feature_columns: numeric per-query columns for a router (mean over the query's rows).
        kind: keep only the rows of this request kind (the ``kind`` column, missing = ``text``,
            ``calibration.run_kinds``); None keeps every row whatever its kind.
        blackbox: with a black-box scorer (``verifier``, ``consistency``, ``self_report``), how to
            score the ``scorer_calls`` column (``calibration.blackbox_scores``).
        commit: a ``prefix`` commit rule (``policies.commit``): each answer is scored on its prefix,
            and a stage that escalates is charged as the gateway charges its cancelled call
            (``calibration.prefix_cost``; needs token prices: ``prices``). None or ``buffer``:
            whole answers.

    Raises:
        RunsError: one-line message naming file / row / column.
    """
    path = Path(path)
    where = dict(where or {})
    _check_score_options(score_column, scorer, score_tokens)
    prefix = _prefix_rule(commit, score_column, scorer, prices)
    price_sheet = _load_prices(prices) if prices is not None else None
    wanted = wanted_columns(score_column, scorer, feature_columns or [], kind)
    if prefix is not None:
        wanted |= {REQUEST_BYTES_COLUMN, COMPLETION_CAP_COLUMN}
    columns = _read(path, wanted, where, kind)
    return _Builder(path, columns, where, blackbox or BlackboxOptions(), score_tokens, prefix).build(
        price_sheet, prices, score_column, scorer, top_k, feature_columns or []
    )


def _prefix_rule(
    commit: CommitRule | None, score_column: str | None, scorer: str | None, prices: Path | None
) -> CommitRule | None:
    """The ``prefix`` commit rule to score with, or None (whole answers); fails on what it cannot score."""
    prefix = commit if commit is not None and commit.rule == "prefix" else None
    if prefix is not None and (score_column is not None or scorer in BLACKBOX_SCORERS):
        raise RunsError("a prefix commit rule scores the logprobs of a prefix: give a logprob scorer")
    if prefix is not None and prices is None:
        raise RunsError("a prefix commit rule's cost needs token prices: pass --prices PRICES.yaml")
    return prefix


def _read(path: Path, wanted: set[str], where: Mapping[str, str], kind: str | None) -> Columns:
    """The wanted columns of the rows matching ``where`` (and ``kind`` when given)."""
    try:
        columns = read_columns(path, wanted, dict(where))
        if kind is not None:
            columns = rows_of_kind(columns, kind, path)
    except (TableReadError, RunKindError) as exc:
        raise RunsError(str(exc)) from None
    return columns


def _load_prices(path: Path) -> dict[str, Price]:
    try:
        return load_price_sheet(path)
    except PriceSheetError as exc:
        raise RunsError(str(exc)) from None


def _load_overruns(path: Path) -> dict[str, int]:
    try:
        return load_cancel_overruns(path)
    except PriceSheetError as exc:
        raise RunsError(str(exc)) from None


def _check_score_options(score_column: str | None, scorer: str | None, score_tokens: str) -> None:
    if score_column is not None and (scorer is not None or score_tokens != "all"):
        raise RunsError("give either a score column or a scorer (and its score tokens), not both")
    if score_tokens not in SCORE_TOKENS:
        raise RunsError(f"unknown score tokens {score_tokens!r}; choose one of {', '.join(SCORE_TOKENS)}")
    if scorer in BLACKBOX_SCORERS and score_tokens != "all":
        raise RunsError(
            f"scorer {scorer} reads no logprobs: its score tokens must be all, got {score_tokens}"
        )


class _Builder(RunsColumns):
    """Validation and pivoting of one file's columns (one instance per load)."""

    def __init__(
        self,
        path: Path,
        columns: Columns,
        where: Mapping[str, str],
        blackbox: BlackboxOptions,
        score_tokens: str = "all",
        prefix: CommitRule | None = None,
    ):
        super().__init__(path, columns, where)
        self.score_tokens = score_tokens
        self.prefix = prefix
        self.saving: np.ndarray | None = None
        self.blackbox_options = blackbox
        self.blackbox: BlackboxScores | None = None

    def build(
        self,
        price_sheet: dict[str, Price] | None,
        prices_path: Path | None,
        score_column: str | None,
        scorer: str | None,
        top_k: int | None,
        feature_columns: Sequence[str],
    ) -> RunsMatrix:
        for name in REQUIRED_COLUMNS:
            self.require_column(name)
        if self.columns.rows.size == 0:
            filters = " ".join(f"--where {c}={v}" for c, v in self.where.items())
            raise RunsError(f"{self.path}: no rows" + (f" match {filters}" if filters else ""))
        for name in ("query_id", "model"):
            missing = self.columns.missing[name]
            if missing.any():
                raise self.fail("missing value", int(np.flatnonzero(missing)[0]), name)
        query = np.asarray(self.columns.values["query_id"]).astype(str)
        model = np.asarray(self.columns.values["model"]).astype(str)
        quality, _ = self.numeric("correct")
        out_of_range = np.flatnonzero((quality < 0) | (quality > 1))
        if out_of_range.size:
            first = int(out_of_range[0])
            raise self.fail(f"quality {quality[first]:g} outside [0, 1]", first, "correct")
        cost = self.cost(model, price_sheet, prices_path)
        scores = row_scores(
            self, score_column, scorer, top_k, self.score_tokens, self.blackbox_options, self.prefix
        )
        self.blackbox = scores.blackbox
        read, continues = scores.prefix_read, scores.prefix_continues
        if read is not None and continues is not None and price_sheet is not None:
            overruns = _load_overruns(prices_path) if prices_path is not None else {}
            self.saving = self.prefix_saving(model, cost, price_sheet, overruns, read, continues)
        # Certainly wrong (a failed check) or unfinished (cut at a cap the request did not set):
        # never accepted, whatever the scorer says, as the gateway escalates both.
        invalid = self.flagged(VALID_COLUMN, flag=False) | self.flagged(TRUNCATED_COLUMN, flag=True)
        if continues is not None:
            # A prefix rule decides before the answer ends: a cut or malformed answer is known only
            # when it was read whole; a longer one is committed or escalated on its prefix's score
            # (a committed one is delivered as it is, its graded quality counting).
            invalid &= ~continues
        scores.score[invalid] = -np.inf
        scores = replace(scores, missing=scores.missing & ~invalid)
        features = []
        for column in feature_columns:
            self.require_column(column, "feature column")
            features.append(self.numeric(column)[0])
        return self.pivot(query, model, quality, cost, scores, features, score_column)

    def pivot(
        self,
        query: np.ndarray,
        model: np.ndarray,
        quality: np.ndarray,
        cost: np.ndarray,
        scores: RowScores,
        features: list[np.ndarray],
        score_column: str | None,
    ) -> RunsMatrix:
        """The kept queries' (n, k) matrices, models ordered by mean cost (ties: by name)."""
        import pandas as pd

        scorer = scores.scorer

        query_codes, query_names = pd.factorize(query)
        model_codes, model_names = pd.factorize(model)
        n_models = len(model_names)
        self.check_no_duplicate(query, model, query_codes.astype(np.int64) * n_models + model_codes)
        keep_rows, kept_queries = self.kept_queries(
            query_codes, query_names, model_codes, model_names, scores.missing, scorer, score_column
        )
        # Renumber the kept queries 0..n-1 in first-seen order and fill (n, k) matrices.
        new_index = np.cumsum(kept_queries) - 1
        rows_q = new_index[query_codes[keep_rows]]
        rows_m = model_codes[keep_rows]
        n = int(kept_queries.sum())

        def matrix(values: np.ndarray) -> np.ndarray:
            out = np.empty((n, n_models), dtype=np.float64)
            out[rows_q, rows_m] = values[keep_rows]
            return out

        quality_m, cost_m, score_m = matrix(quality), matrix(cost), matrix(scores.score)
        scoring_m = None if self.blackbox is None else matrix(self.blackbox.scoring_cost)
        saving_m = None if self.saving is None else matrix(self.saving)
        unscored = self.unscored_models(model, keep_rows, scorer)
        column_order = _by_mean_cost(cost_m, model_names)
        feature_matrix = np.column_stack([matrix(f).mean(axis=1) for f in features]) if features else None
        return RunsMatrix(
            models=tuple(str(model_names[j]) for j in column_order),
            query_ids=np.asarray(query_names, dtype=str)[kept_queries],
            quality=quality_m[:, column_order],
            cost=cost_m[:, column_order],
            score=score_m[:, column_order],
            strata=self.strata(n, rows_q, keep_rows),
            features=feature_matrix,
            source=str(self.path),
            scorer=scorer,
            top_k=scores.top_k,
            score_column=score_column,
            score_tokens=self.score_tokens if score_column is None else "all",
            notes=tuple(self.notes),
            scoring_cost=None if scoring_m is None else scoring_m[:, column_order],
            unscored=unscored,
            scorer_settings=None if self.blackbox is None else self.blackbox.settings,
            escalation_saving=None if saving_m is None else saving_m[:, column_order],
            commit=self.prefix,
        )

    def unscored_models(self, model: np.ndarray, keep_rows: np.ndarray, scorer: str) -> tuple[str, ...]:
        """The kept models without recorded calls of the black-box scorer (noted), sorted."""
        if self.blackbox is None:
            return ()
        unscored = tuple(sorted({str(m) for m in np.asarray(model)[keep_rows & self.blackbox.unscored_rows]}))
        if unscored:
            self.notes.append(
                f"no recorded {scorer} calls for {', '.join(unscored)}: used alone or as a last stage only"
            )
        return unscored

    def kept_queries(
        self,
        query_codes: np.ndarray,
        query_names: np.ndarray,
        model_codes: np.ndarray,
        model_names: np.ndarray,
        score_missing: np.ndarray,
        scorer: str,
        score_column: str | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(rows kept (r,), queries kept (q,))``, both bool: a query with a missing score is dropped
        whole (noted); a kept query without a row for every model, or no query left, is an error."""
        n_models = len(model_names)
        keep_rows = np.ones(query_codes.shape[0], dtype=bool)
        if score_missing.any():
            dropped = np.unique(query_codes[score_missing])
            keep_rows = ~np.isin(query_codes, dropped)
            label = f"column '{score_column}'" if score_column else f"{scorer} from '{LOGPROBS_COLUMN}'"
            self.notes.append(
                f"dropped {dropped.size} quer{'y' if dropped.size == 1 else 'ies'} "
                f"({int((~keep_rows).sum())} rows) with a missing score ({label})"
            )
        present = np.zeros((len(query_names), n_models), dtype=bool)
        present[query_codes, model_codes] = True
        kept_queries = np.zeros(len(query_names), dtype=bool)
        kept_queries[query_codes[keep_rows]] = True
        incomplete = np.flatnonzero(kept_queries & ~present.all(axis=1))
        if incomplete.size:
            q = int(incomplete[0])
            absent_model = model_names[int(np.flatnonzero(~present[q])[0])]
            raise RunsError(
                f"{self.path}: query '{query_names[q]}' has no row for model '{absent_model}' "
                f"({incomplete.size} incomplete quer{'y' if incomplete.size == 1 else 'ies'}; every "
                "query needs a row for every model)"
            )
        if not kept_queries.any():
            raise RunsError(self.no_query_left(model_codes, model_names, score_missing, scorer, score_column))
        return keep_rows, kept_queries

    def no_query_left(
        self,
        model_codes: np.ndarray,
        model_names: np.ndarray,
        score_missing: np.ndarray,
        scorer: str,
        score_column: str | None,
    ) -> str:
        """Why every query was dropped: the models without a score, worst first."""
        rows = np.bincount(model_codes, minlength=len(model_names))
        missing = np.bincount(model_codes[score_missing], minlength=len(model_names))
        blamed = sorted(
            (j for j in range(len(model_names)) if missing[j]), key=lambda j: -missing[j] / rows[j]
        )
        parts = [
            f"'{model_names[j]}' ({'all' if missing[j] == rows[j] else missing[j]} of {rows[j]} rows)"
            for j in blamed
        ]
        source = f"column '{score_column}'" if score_column else f"'{LOGPROBS_COLUMN}' ({scorer})"
        return (
            f"{self.path}: no query left after dropping rows with a missing score: no score in {source} "
            f"for {', '.join(parts)}; every model needs a score on every query "
            f"(record logprobs for every model, or give a score column they all fill)"
        )


def _by_mean_cost(cost: np.ndarray, model_names: np.ndarray) -> list[int]:
    """The (n, k) ``cost`` matrix's column indices ordered by mean cost ascending (ties: by name)."""
    mean_cost = cost.mean(axis=0)
    return sorted(range(len(model_names)), key=lambda j: (mean_cost[j], str(model_names[j])))
