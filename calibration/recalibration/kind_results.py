"""One request kind of a recalibration: the comparison on its held-out queries, and what refuses
a new policy for its kinds (``calibration.recalibration.recalibrate``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calibration.policy.calibrate import Calibrated
from calibration.policy.kinds import CalibratedKinds
from calibration.recalibration.compare import Comparison, compare_policies
from calibration.recalibration.options import RecalibrateOptions
from calibration.recalibration.traffic_runs import KindRuns, TrafficRuns
from calibration.splits import Split
from policies.kinds import TOP_LEVEL_KIND, kind_policy, served_kinds
from policies.schema import Policy


@dataclass(frozen=True)
class KindRecalibration:
    """One request kind: its calibration, the comparison on its held-out queries, their sizes.

    ``section`` is where the kind's routes are in the new policy: ``top level`` or ``kinds.KIND``.
    """

    kind: str
    section: str
    calibrated: Calibrated
    comparison: Comparison
    split: Split
    queries: int
    models: tuple[str, ...]
    strata: list[str] | None


def top_first(calibrated: CalibratedKinds) -> list[str]:
    """The calibrated kinds, the one of the top level first."""
    return [calibrated.top_kind, *(k for k in calibrated.per_kind if k != calibrated.top_kind)]


def about(kind: str, note: str, several: bool) -> str:
    """A note about one kind's queries, naming the kind when the traffic has several."""
    return f"kind {kind}: {note}" if several else note


def compare_kind(
    kind: str,
    calibrated: CalibratedKinds,
    runs: KindRuns,
    current: Policy | None,
    split: Split,
    options: RecalibrateOptions,
    seed: np.random.SeedSequence,
) -> KindRecalibration:
    """Both policies, each as it serves ``kind``, on the kind's held-out queries."""
    comparison = compare_policies(
        kind_policy(calibrated.policy, kind),
        runs.new,
        None if current is None else kind_policy(current, kind),
        runs.current,
        split.test,
        resamples=options.resamples,
        confidence=options.confidence,
        tolerances=options.tolerances,
        seed=seed,
    )
    strata = None if runs.new.strata is None else sorted(set(runs.new.strata.tolist()))
    return KindRecalibration(
        kind=kind,
        section="top level" if kind == calibrated.top_kind else f"kinds.{kind}",
        calibrated=calibrated.per_kind[kind],
        comparison=comparison,
        split=split,
        queries=runs.new.n_queries,
        models=runs.new.models,
        strata=strata,
    )


def missing_kinds(
    current: Policy | None, calibrated: CalibratedKinds, runs: TrafficRuns, options: RecalibrateOptions
) -> str | None:
    """Why the new policy must not replace a current one that serves a kind with routes of its own
    (its top level for text, a section for the others) which the new one did not calibrate."""
    if current is None:
        return None
    for kind in served_kinds(current):
        if kind in calibrated.per_kind:
            continue
        loaded = runs.loaded.get(kind)
        found = (
            runs.unloadable.get(kind)
            or f"the traffic has {0 if loaded is None else loaded.new.n_queries} complete {kind} queries "
            f"with a score (--min-queries {options.min_queries})"
        )
        served_by = "its top level" if kind == TOP_LEVEL_KIND else f"section kinds.{kind}"
        return (
            f"the current policy {current.policy_id} serves {kind} requests with {served_by}, which the "
            f"new policy cannot recalibrate ({found}): it would serve them with routes calibrated on "
            f"{calibrated.top_kind} queries"
        )
    return None


def first_refusal(kinds: dict[str, KindRecalibration]) -> str | None:
    """The first kind's refusal, naming the kind when there are several."""
    for kind, one in kinds.items():
        refusal = one.comparison.refusal()
        if refusal is not None:
            return about(kind, refusal, len(kinds) > 1)
    return None
