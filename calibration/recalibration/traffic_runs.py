"""The exported traffic as runs matrices, one pair per request kind: scored for the new policy and
for the current one, on the same queries.

The complete queries (``traffic.export.select_complete``) are written as a runs table, ``kind``
column included, and each kind's rows are loaded as ``cascade calibrate`` loads them
(``calibration.policy.kinds``: a table of one kind loads whole). The new policy's scorer of a kind is
``--scorer``/``--top-k``, else the scorer the current policy serves that kind with (its section's,
else its top level's), else the defaults; the current policy's matrix of a kind is scored with
the scorer it serves that kind with. Both read the tokens that scorer reads (``ScorerSpec.tokens``).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calibration.policy.kinds import load_kind_runs, runs_kinds
from calibration.recalibration.options import RecalibrateOptions
from calibration.runs import RunsMatrix
from calibration.runs_columns import RunsError
from calibration.runs_scores import DEFAULT_SCORER, DEFAULT_TOP_K
from policies.kinds import kind_policy
from policies.schema import Policy
from traffic.export import Selection, write_runs

TRAFFIC_NAME = "the exported traffic"


@dataclass(frozen=True)
class KindRuns:
    """One request kind's queries: scored for the new policy and (same queries, same order) for the
    current one (None without a current policy)."""

    kind: str
    new: RunsMatrix
    current: RunsMatrix | None


@dataclass(frozen=True)
class TrafficRuns:
    """The kinds the traffic holds (``REQUEST_KINDS`` order) and what became of each: its matrices,
    or why it could not be loaded (a kind whose rows have no usable score, e.g.)."""

    kinds: list[str]
    loaded: dict[str, KindRuns]
    unloadable: dict[str, str]


def load_traffic_runs(
    selection: Selection, options: RecalibrateOptions, current: Policy | None
) -> TrafficRuns:
    """Every kind of the selection loaded (module docstring). ``RunsError`` when the traffic holds one
    kind and it cannot be loaded; with several, a kind that cannot is left in ``unloadable``."""
    with _exported_runs(selection) as path:
        try:
            kinds = runs_kinds(path)
        except RunsError as exc:
            raise RunsError(str(exc).replace(str(path), TRAFFIC_NAME)) from None
        loaded: dict[str, KindRuns] = {}
        unloadable: dict[str, str] = {}
        for kind in kinds:
            try:
                loaded[kind] = _load_kind(path, kind, kinds, options, current)
            except RunsError as exc:
                if len(kinds) == 1:
                    raise
                unloadable[kind] = str(exc)
    return TrafficRuns(kinds, loaded, unloadable)


def scoring(options: RecalibrateOptions, serving: Policy | None) -> tuple[str, int]:
    """A new scorer: --scorer/--top-k, else ``serving``'s (the current policy as it serves the
    kind), else the defaults."""
    if serving is not None:
        return options.scorer or serving.scorer.name, options.top_k or serving.scorer.top_k
    return options.scorer or DEFAULT_SCORER, options.top_k or DEFAULT_TOP_K


def _load_kind(
    path: Path, kind: str, kinds: list[str], options: RecalibrateOptions, current: Policy | None
) -> KindRuns:
    serving = None if current is None else kind_policy(current, kind)
    scorer, top_k = scoring(options, serving)
    tokens = "all" if serving is None else serving.scorer.tokens
    new = _load(path, kind, kinds, options, scorer, top_k, tokens)
    if serving is None:
        return KindRuns(kind, new, None)
    if (serving.scorer.name, serving.scorer.top_k) == (scorer, top_k):
        return KindRuns(kind, new, new)
    old = _load(path, kind, kinds, options, serving.scorer.name, serving.scorer.top_k, tokens)
    # A query one scorer can score and the other cannot is left out of both: same queries, same order.
    _, in_new, in_old = np.intersect1d(new.query_ids, old.query_ids, return_indices=True)
    order = np.argsort(in_new)
    return KindRuns(kind, new.subset(in_new[order]), old.subset(in_old[order]))


@contextlib.contextmanager
def _exported_runs(selection: Selection) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="cascade-recalibrate-") as directory:
        path = Path(directory) / "traffic-runs.jsonl"
        write_runs(selection.rows, path)
        yield path


def _load(
    path: Path,
    kind: str,
    kinds: list[str],
    options: RecalibrateOptions,
    scorer: str,
    top_k: int,
    tokens: str = "all",
) -> RunsMatrix:
    try:
        return load_kind_runs(
            path, kind, kinds, prices=options.prices, scorer=scorer, top_k=top_k, score_tokens=tokens
        )
    except RunsError as exc:  # name the traffic, not the temporary file
        raise RunsError(str(exc).replace(str(path), TRAFFIC_NAME)) from None
