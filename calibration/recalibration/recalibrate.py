"""``cascade recalibrate``: fresh traffic -> a new policy, checked against the served one on held-out queries.

Steps (each one the code of the command that does it alone):

1. the current policy: ``--current FILE``, else the one served from the Redis of ``--push``, else none;
2. export the traffic store as ``cascade traffic export`` does (complete queries only) and load each
   request kind's rows (the ``kind`` column) as ``cascade calibrate`` does, scored with the scorer
   the current policy serves that kind with unless told otherwise
   (``calibration.recalibration.traffic_runs``);
3. split each kind's QUERIES into a calibration and a held-out part (stratified by ``dataset``, seeded);
4. calibrate the new policy on the calibration parts as ``cascade calibrate`` does
   (``calibration.policy.kinds.calibrate_kinds``: the top level from the text queries, a section per other
   kind, held-out expectations cross-fitted within the calibration part);
5. score both policies on each kind's held-out part, each as it serves that kind
   (``policies.kinds.kind_policy``), and apply the push rule (``calibration.recalibration.rule``).

A policy with a router is recalibrated with its router: in step 4 each tier chooses again between
its cascade, the router refitted on the calibration part and route-then-cascade, from the features
the gateway stored with each sample (``calibration.recalibration.router_refit``); in step 5 a
routed tier is scored as its router serves it.

A kind with fewer than ``--min-queries`` complete, scored queries is not calibrated: its requests
are served by the new policy's top level. That refuses the new policy when the current one serves
the kind with routes of its own (a section, or the top level for text): the push would hand its
requests to routes calibrated on another kind.

Writing the policy, pushing it and the report are the caller's (``finish``), so this module can be
run and inspected without side effects.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np

from calibration.heldout_expected import HeldoutSettings
from calibration.policy.kinds import calibrate_kinds
from calibration.recalibration.kind_results import (
    KindRecalibration,
    about,
    compare_kind,
    first_refusal,
    missing_kinds,
    top_first,
)
from calibration.recalibration.options import RecalibrateOptions
from calibration.recalibration.redis_io import read_served
from calibration.recalibration.router_refit import RouterRefit, RouterRefitError, router_refit
from calibration.recalibration.traffic_runs import KindRuns, TrafficRuns, load_traffic_runs
from calibration.splits import Split, stratified_splits
from calibration.tiers import TiersSpec, load_tiers
from policies import PolicyError, load_policy
from policies.kinds import TOP_LEVEL_KIND, kind_policy, kind_tiers, served_kinds
from policies.schema import Policy
from publishing import PolicyKeys, check_servable
from redaction import redact_url
from traffic.export import Selection, export_store
from traffic.redis_connect import connect_sync

Progress = Callable[[str], AbstractContextManager[Any]]


class RecalibrationError(Exception):
    """Recalibration cannot run (bad options, too little traffic, a model without rows); one line."""


@dataclass(frozen=True)
class CurrentPolicy:
    """The policy compared with: where it came from and, if served from Redis, its stored text."""

    policy: Policy | None
    source: str | None
    served_text: str | None = None
    client: Any = None


@dataclass(frozen=True)
class Recalibration:
    """Everything the command decided, before anything is written or pushed.

    ``kinds``: every calibrated kind, the top level's first; ``policy``: the new policy (all kinds).
    """

    options: RecalibrateOptions
    policy: Policy
    kinds: dict[str, KindRecalibration]
    current: CurrentPolicy
    selection_queries: int
    incomplete_queries: int
    refusal: str | None
    notes: list[str]

    @property
    def accepted(self) -> bool:
        """Whether the new policy passed (would be, or is, pushed)."""
        return self.refusal is None

    @property
    def top(self) -> KindRecalibration:
        """The kind the new policy's top level was calibrated on (text when the traffic has it)."""
        return next(iter(self.kinds.values()))


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
    if current.policy is not None:
        _check_scorable(current.policy)
    with progress(f"Reading traffic from {redact_url(options.store)} ..."):
        exported = export_store(
            options.store, since=options.since, where=options.where, models=options.models
        )
    selection = exported.selection
    notes = list(exported.notes)
    _check_routed_models(current.policy, selection)
    with progress(f"Loading {len(selection.rows):,} rows ({selection.queries:,} queries) ..."):
        runs = load_traffic_runs(selection, options, current.policy)
    several = len(runs.kinds) > 1
    for kind, loaded in runs.loaded.items():
        notes += [about(kind, note, several) for note in loaded.new.notes]
    refit = _refit(_eligible(runs, options, selection, notes), selection, current, options)
    eligible = refit.runs
    notes += refit.notes
    splits = {kind: _holdout_split(one, options) for kind, one in eligible.items()}
    size = ", ".join(f"{split.calibration.size:,} {kind}" for kind, split in splits.items())
    with progress(f"Calibrating on {size} queries ..."):
        heldout = HeldoutSettings(splits=options.heldout_splits) if options.heldout_splits else None
        calibrated = calibrate_kinds(
            {kind: eligible[kind].new.subset(split.calibration) for kind, split in splits.items()},
            spec,
            randomize=options.randomize,
            heldout=heldout,
            routing=refit.routing,
        )
    notes += list(calibrated.notes)
    kinds: dict[str, KindRecalibration] = {}
    # Child 0 of SeedSequence(seed) drew the splits; the bootstrap of the i-th kind uses child 1 + i.
    seeds = np.random.SeedSequence(options.seed).spawn(1 + len(calibrated.per_kind))[1:]
    for index, kind in enumerate(top_first(calibrated)):
        one = calibrated.per_kind[kind]
        notes += [about(kind, n, several) for n in one.notes]
        notes += [about(kind, s.warning, several) for s in one.solutions.values() if s.warning]
        with progress(f"Comparing on {splits[kind].test.size:,} held-out {kind} queries ..."):
            kinds[kind] = compare_kind(
                kind, calibrated, eligible[kind], current.policy, splits[kind], options, seeds[index]
            )
    refusal = (
        missing_kinds(current.policy, calibrated, runs, options)
        or _invalid(calibrated.policy)
        or first_refusal(kinds)
    )
    return Recalibration(
        options=options,
        policy=calibrated.policy,
        kinds=kinds,
        current=current,
        selection_queries=selection.queries,
        incomplete_queries=len(selection.incomplete),
        refusal=refusal,
        notes=notes,
    )


def _refit(
    eligible: dict[str, KindRuns], selection: Selection, current: CurrentPolicy, options: RecalibrateOptions
) -> RouterRefit:
    """The current policy's router refitted on the sampled features (``router_refit``), its
    failure as a RecalibrationError."""
    try:
        return router_refit(eligible, selection.rows, current.policy, options)
    except RouterRefitError as exc:
        raise RecalibrationError(str(exc)) from None


def _holdout_split(one: KindRuns, options: RecalibrateOptions) -> Split:
    """The one calibration / held-out split of a kind's queries (child 0 of the seed draws it)."""
    new = one.new
    return stratified_splits(
        new.n_queries, n_splits=1, test_fraction=options.holdout, seed=options.seed, strata=new.strata
    )[0]


def _eligible(
    runs: TrafficRuns, options: RecalibrateOptions, selection: Selection, notes: list[str]
) -> dict[str, KindRuns]:
    """The kinds with at least ``--min-queries`` scored queries; the others noted (RecalibrationError
    when none has)."""
    eligible = {k: r for k, r in runs.loaded.items() if r.new.n_queries >= options.min_queries}
    for kind, reason in runs.unloadable.items():
        notes.append(f"kind {kind}: not calibrated: {reason}")
    for kind, loaded in runs.loaded.items():
        if kind not in eligible:
            notes.append(
                f"kind {kind}: not calibrated: only {loaded.new.n_queries} complete queries with a score "
                f"(--min-queries {options.min_queries}); the new policy serves its requests with its "
                "top level"
            )
    if eligible:
        return eligible
    detail = f"; {selection.most_lacking()}" if selection.incomplete else ""
    counts = {k: r.new.n_queries for k, r in runs.loaded.items()}
    if len(runs.kinds) == 1:
        found = f"only {next(iter(counts.values()), 0)} complete queries with a score"
    else:
        each = ", ".join(f"{kind} {counts.get(kind, 0)}" for kind in runs.kinds)
        most = max(counts.values(), default=0)
        found = f"only {most} complete queries with a score in any request kind ({each})"
    raise RecalibrationError(
        f"{found} ({len(selection.incomplete)} incomplete dropped{detail}); recalibrate needs at least "
        f"{options.min_queries} (--min-queries)"
    )


def _check_scorable(current: Policy) -> None:
    """Refuse a current policy whose scores the traffic cannot reproduce: an ``external`` scorer,
    or a tier with a fitted scorer of its own (its threshold is on that scorer's scale, which the
    comparison, scoring by the section's scorer, would misread)."""
    for kind in served_kinds(current):
        section = kind_policy(current, kind)
        where = "" if kind == TOP_LEVEL_KIND else f" for {kind} requests"
        if section.scorer.name == "external":
            raise RecalibrationError(
                f"the current policy {current.policy_id} uses scorer 'external'{where}, which cannot be "
                "computed from the traffic's logprobs"
            )
        own = next(((n, t.scorer) for n, t in section.tiers.items() if t.scorer is not None), None)
        if own is not None:
            tier, scorer = own
            calibrate = "cascade calibrate --benefit-scorer" if scorer.is_fitted else "cascade calibrate"
            raise RecalibrationError(
                f"the current policy {current.policy_id} serves tier {tier}{where} with its own scorer "
                f"'{scorer.name}', which recalibrate does not refit or compare: export the traffic "
                f"(cascade traffic export) and run {calibrate} on it"
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
    routed = sorted({m for _, _, tier in kind_tiers(current) for route in tier.routes for m in route.models})
    missing = [m for m in routed if m not in selection.models]
    if missing:
        raise RecalibrationError(
            f"the current policy {current.policy_id} routes to {', '.join(missing)}, which the exported "
            f"traffic has no rows for (models: {', '.join(selection.models)}); it cannot be compared"
        )


def _invalid(policy: Policy) -> str | None:
    try:
        check_servable(policy, None)
    except PolicyError as exc:
        return f"the new policy cannot be served: {exc}"
    return None
