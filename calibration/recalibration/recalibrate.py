"""``cascade recalibrate``: fresh traffic -> a new policy, checked against the served one on held-out queries.

Steps (each one the code of the command that does it alone):

1. the current policy: ``--current FILE``, else the one served from the Redis of ``--push``, else none;
2. export the traffic store as ``cascade traffic export`` does (complete queries only) and load it
   as ``cascade calibrate`` does, scored with the current policy's scorer unless told otherwise;
3. split the QUERIES into a calibration and a held-out part (stratified by ``dataset``, seeded);
4. calibrate the new policy on the calibration part (``calibration.calibrate``);
5. score both policies on the held-out part and apply the push rule (``calibration.recalibration.rule``).

Writing the policy, pushing it and the report are the caller's (``finish``), so this module can be
run and inspected without side effects.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from calibration.calibrate import Calibrated, calibrate
from calibration.recalibration.compare import Comparison, compare_policies
from calibration.recalibration.redis_io import read_served
from calibration.recalibration.rule import Tolerances
from calibration.runs import DEFAULT_SCORER, DEFAULT_TOP_K, RunsError, RunsMatrix, load_runs
from calibration.splits import Split, stratified_splits
from calibration.tiers import TiersSpec, load_tiers
from policies import PolicyError, load_policy
from policies.publish import DEFAULT_PREFIX, PolicyKeys, check_servable
from policies.redaction import redact_url
from policies.schema import Policy
from traffic.export import Selection, export_store, write_runs
from traffic.redis_connect import connect_sync

Progress = Callable[[str], AbstractContextManager[Any]]


class RecalibrationError(Exception):
    """Recalibration cannot run (bad options, too little traffic, a model without rows); one line."""


@dataclass(frozen=True)
class RecalibrateOptions:
    """The command's arguments (see ``cascade recalibrate --help``)."""

    store: str
    tiers: Path
    since: str | None = None
    where: dict[str, str] = field(default_factory=dict)
    models: list[str] | None = None
    current: Path | None = None
    push: str | None = None
    prefix: str = DEFAULT_PREFIX
    seed: int = 0
    holdout: float = 0.5
    prices: Path | None = None
    scorer: str | None = None
    top_k: int | None = None
    randomize: bool = False
    resamples: int = 2000
    confidence: float = 0.95
    tolerances: Tolerances = field(default_factory=Tolerances)
    min_queries: int = 100


@dataclass(frozen=True)
class CurrentPolicy:
    """The policy compared with: where it came from and, if served from Redis, its stored text."""

    policy: Policy | None
    source: str | None
    served_text: str | None = None
    client: Any = None


@dataclass(frozen=True)
class Recalibration:
    """Everything the command decided, before anything is written or pushed."""

    options: RecalibrateOptions
    new: Calibrated
    current: CurrentPolicy
    comparison: Comparison
    selection_queries: int
    incomplete_queries: int
    models: tuple[str, ...]
    split: Split
    queries: int
    strata: list[str] | None
    refusal: str | None
    notes: list[str]

    @property
    def accepted(self) -> bool:
        """Whether the new policy passed (would be, or is, pushed)."""
        return self.refusal is None


def _no_progress(_: str) -> AbstractContextManager[Any]:
    return contextlib.nullcontext()


def recalibrate(options: RecalibrateOptions, progress: Progress = _no_progress) -> Recalibration:
    """Run steps 1-5 (module docstring); RecalibrationError, RunsError, TiersError, StoreError,
    ExportError, RedisPolicyError or RedisUnreachableError with a one-line message when it cannot."""
    _check_options(options)
    spec = load_tiers(options.tiers)
    current = _current_policy(options, progress)
    try:
        return _run(options, spec, current, progress)
    except BaseException:
        if current.client is not None:  # on success the caller pushes with it, then closes it
            current.client.close()
        raise


def _run(
    options: RecalibrateOptions, spec: TiersSpec, current: CurrentPolicy, progress: Progress
) -> Recalibration:
    """Steps 2-5 against the current policy of step 1."""
    if current.policy is not None and current.policy.scorer.name == "external":
        raise RecalibrationError(
            f"the current policy {current.policy.policy_id} uses scorer 'external', which cannot be "
            "computed from the traffic's logprobs"
        )
    with progress(f"Reading traffic from {redact_url(options.store)} ..."):
        exported = export_store(
            options.store, since=options.since, where=options.where, models=options.models
        )
    selection = exported.selection
    notes = list(exported.notes)
    _check_routed_models(current.policy, selection)
    with progress(f"Loading {len(selection.rows):,} rows ({selection.queries:,} queries) ..."):
        new_matrix, current_matrix = _load_matrices(selection, options, current.policy)
    notes += list(new_matrix.notes)
    if new_matrix.n_queries < options.min_queries:
        detail = f"; {selection.most_lacking()}" if selection.incomplete else ""
        raise RecalibrationError(
            f"only {new_matrix.n_queries} complete queries with a score "
            f"({len(selection.incomplete)} incomplete dropped{detail}); recalibrate needs at least "
            f"{options.min_queries} (--min-queries)"
        )
    split = stratified_splits(
        new_matrix.n_queries,
        n_splits=1,
        test_fraction=options.holdout,
        seed=options.seed,
        strata=new_matrix.strata,
    )[0]
    with progress(f"Calibrating on {split.calibration.size:,} queries ..."):
        new = calibrate(new_matrix, spec, rows=split.calibration, randomize=options.randomize)
    notes += [solution.warning for solution in new.solutions.values() if solution.warning]
    with progress(f"Comparing on {split.test.size:,} held-out queries ({options.resamples:,} resamples) ..."):
        comparison = compare_policies(
            new.policy,
            new_matrix,
            current.policy,
            current_matrix,
            split.test,
            resamples=options.resamples,
            confidence=options.confidence,
            tolerances=options.tolerances,
            seed=np.random.SeedSequence(options.seed).spawn(2)[1],  # child 0 drew the split
        )
    refusal = _invalid(new.policy) or comparison.refusal()
    strata = None if new_matrix.strata is None else sorted(set(new_matrix.strata.tolist()))
    return Recalibration(
        options=options,
        new=new,
        current=current,
        comparison=comparison,
        selection_queries=selection.queries,
        incomplete_queries=len(selection.incomplete),
        models=new_matrix.models,
        split=split,
        queries=new_matrix.n_queries,
        strata=strata,
        refusal=refusal,
        notes=notes,
    )


def _check_options(options: RecalibrateOptions) -> None:
    if not 0.0 < options.holdout < 1.0:
        raise RecalibrationError(f"--holdout must be in (0, 1), got {options.holdout:g}")
    if options.resamples < 100:
        raise RecalibrationError(f"--resamples must be at least 100, got {options.resamples}")
    if not 0.5 <= options.confidence < 1.0:
        raise RecalibrationError(f"--confidence must be in [0.5, 1), got {options.confidence:g}")
    if options.min_queries < 4:
        raise RecalibrationError(f"--min-queries must be at least 4, got {options.min_queries}")
    if options.tolerances.quality < 0 or options.tolerances.cost < 0:
        raise RecalibrationError("the tolerances must be >= 0")


def _current_policy(options: RecalibrateOptions, progress: Progress) -> CurrentPolicy:
    """Step 1: --current, else the policy served from the Redis of --push, else none."""
    from_file: Policy | None = None
    if options.current is not None:
        try:
            from_file = load_policy(options.current)
        except PolicyError as exc:
            raise RecalibrationError(f"--current: {exc}") from None
    if options.push is None:
        return CurrentPolicy(from_file, None if options.current is None else str(options.current))
    keys = PolicyKeys(options.prefix)
    with progress(f"Reading the served policy from {redact_url(options.push)} ..."):
        client = connect_sync(options.push)
        text, served = read_served(client, keys)
    where = f"{redact_url(options.push)} ({keys.policy_current})"
    if from_file is None:
        return CurrentPolicy(served, where if served is not None else None, text, client)
    if served is not None and served.policy_id != from_file.policy_id:
        raise RecalibrationError(
            f"--current {options.current} is policy {from_file.policy_id} but {where} serves "
            f"{served.policy_id}: the push would replace a policy that was not compared (drop --current "
            "to compare with the served one)"
        )
    return CurrentPolicy(from_file, str(options.current), text, client)


def _check_routed_models(current: Policy | None, selection: Selection) -> None:
    if current is None:
        return
    routed = sorted({m for tier in current.tiers.values() for route in tier.routes for m in route.models})
    missing = [m for m in routed if m not in selection.models]
    if missing:
        raise RecalibrationError(
            f"the current policy {current.policy_id} routes to {', '.join(missing)}, which the exported "
            f"traffic has no rows for (models: {', '.join(selection.models)}); it cannot be compared"
        )


def _scoring(options: RecalibrateOptions, current: Policy | None) -> tuple[str, int]:
    """The new policy's scorer: --scorer/--top-k, else the current policy's, else the defaults."""
    if current is not None:
        return options.scorer or current.scorer.name, options.top_k or current.scorer.top_k
    return options.scorer or DEFAULT_SCORER, options.top_k or DEFAULT_TOP_K


def _load_matrices(
    selection: Selection, options: RecalibrateOptions, current: Policy | None
) -> tuple[RunsMatrix, RunsMatrix | None]:
    """The exported runs scored for the new policy and for the current one, on the same queries."""
    scorer, top_k = _scoring(options, current)
    with _exported_runs(selection) as path:
        new_matrix = _load(path, options, scorer, top_k)
        if current is None:
            return new_matrix, None
        if (current.scorer.name, current.scorer.top_k) == (scorer, top_k):
            return new_matrix, new_matrix
        current_matrix = _load(path, options, current.scorer.name, current.scorer.top_k)
    # A query one scorer can score and the other cannot is left out of both: same queries, same order.
    _, in_new, in_current = np.intersect1d(
        new_matrix.query_ids, current_matrix.query_ids, return_indices=True
    )
    order = np.argsort(in_new)
    return new_matrix.subset(in_new[order]), current_matrix.subset(in_current[order])


@contextlib.contextmanager
def _exported_runs(selection: Selection) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="cascade-recalibrate-") as directory:
        path = Path(directory) / "traffic-runs.jsonl"
        write_runs(selection.rows, path)
        yield path


def _load(path: Path, options: RecalibrateOptions, scorer: str, top_k: int) -> RunsMatrix:
    try:
        return load_runs(path, prices=options.prices, scorer=scorer, top_k=top_k)
    except RunsError as exc:  # name the traffic, not the temporary file
        raise RunsError(str(exc).replace(str(path), "the exported traffic")) from None


def _invalid(policy: Policy) -> str | None:
    try:
        check_servable(policy, None)
    except PolicyError as exc:
        return f"the new policy cannot be served: {exc}"
    return None
