"""Out-of-sample expectations of a policy's tiers, cross-fitted over the evaluate protocol's splits.

A tier's in-sample ``expected`` values are measured on the queries its route was chosen on, so they
overstate quality: among many thresholds, the one picked fits those queries' noise too. Here, on
each of ``splits`` random calibration/test splits of the queries (``calibration.splits``, stratified
by the ``dataset`` column, the same splits ``cascade evaluate`` draws for the same seed), the tier's
objective is solved on the calibration part exactly as ``cascade calibrate`` solves it (envelope,
then the tier's route or mixture), and that route is measured on the test part: mean quality,
cost per query and escalation rate. The policy stores, per tier and measure, the mean over the
splits and its 2.5th and 97.5th percentiles (``policies.schema.HeldOut``).

A ``min_quality`` a calibration part cannot reach gets that part's best route (the one coming
closest), rather than dropping the split: leaving out the splits where the objective is hardest
would flatter the tier.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from calibration.envelope import Envelope, compute_envelope
from calibration.frontier import chain_metrics
from calibration.runs import RunsMatrix
from calibration.splits import Split, stratified_splits
from calibration.tiers import TierObjective, TierSolution, TiersSpec, UnreachableTierError, solve_tier

MEASURES = ("cost_usd", "quality", "escalation_rate")
PERCENTILES = (2.5, 97.5)


@dataclass(frozen=True)
class HeldoutSettings:
    """The cross-fitting protocol: ``cascade evaluate``'s defaults."""

    splits: int = 50
    test_fraction: float = 0.5
    seed: int = 0


def heldout_expectations(
    matrix: RunsMatrix, spec: TiersSpec, settings: HeldoutSettings, *, randomize: bool = False
) -> dict[str, dict[str, Any]]:
    """``{tier: HeldOut document}`` for every tier of ``spec`` (``policies.schema.HeldOut`` fields).

    Raises ValueError when the queries cannot be split (fewer than two, or a half left empty).
    """
    outcomes = split_outcomes(matrix, spec, protocol_splits(matrix, settings), randomize)
    return {name: heldout_document(values, settings) for name, values in outcomes.items()}


def protocol_splits(matrix: RunsMatrix, settings: HeldoutSettings) -> list[Split]:
    """The protocol's splits of the matrix's queries (stratified by its ``strata``)."""
    return stratified_splits(
        matrix.n_queries,
        n_splits=settings.splits,
        test_fraction=settings.test_fraction,
        seed=settings.seed,
        strata=matrix.strata,
    )


def split_outcomes(
    matrix: RunsMatrix, spec: TiersSpec, splits: list[Split], randomize: bool
) -> dict[str, np.ndarray]:
    """Per tier, (splits, ``MEASURES``): the tier solved on each split's calibration part and its
    route measured on the test part."""
    outcomes = {name: np.empty((len(splits), len(MEASURES))) for name in spec.tiers}
    for index, split in enumerate(splits):
        envelope = compute_envelope(matrix, rows=split.calibration)
        for name, objective in spec.tiers.items():
            solution = solve_or_best(envelope, objective, randomize, name)
            outcomes[name][index] = route_outcome(matrix, solution, split.test)
    return outcomes


def heldout_document(outcomes: np.ndarray, settings: HeldoutSettings) -> dict[str, Any]:
    """A HeldOut document of per-split outcomes (splits, ``MEASURES``); a split without outcomes
    (a row with NaN) is left out of it."""
    kept = outcomes[np.isfinite(outcomes).all(axis=1)]
    return {
        "splits": int(kept.shape[0]),
        "test_fraction": settings.test_fraction,
        "seed": settings.seed,
        **{
            measure: spread(kept[:, column], upper=None if measure == "cost_usd" else 1.0)
            for column, measure in enumerate(MEASURES)
        },
    }


def solve_or_best(envelope: Envelope, objective: TierObjective, randomize: bool, name: str) -> TierSolution:
    """The tier's solution on this envelope; for an unreachable ``min_quality``, the best route."""
    try:
        return solve_tier(envelope, objective, randomize=randomize, name=name)
    except UnreachableTierError:
        best = TierObjective(min_quality=float(envelope.quality[-1]))
        return solve_tier(envelope, best, randomize=False, name=name)


def route_outcome(matrix: RunsMatrix, solution: TierSolution, rows: np.ndarray) -> np.ndarray:
    """``[cost_usd, quality, escalation_rate]`` of a tier's route(s) on ``rows``, weighted by share."""
    total = np.zeros(len(MEASURES))
    for share in solution.routes:
        total += share.weight * np.array(chain_metrics(matrix, share.models, share.thresholds, rows))
    return total


def spread(values: np.ndarray, upper: float | None = None) -> dict[str, float]:
    """``{mean, low, high}``: the mean and the 2.5th / 97.5th percentiles of per-split values,
    clipped to ``[0, upper]`` (means of values in [0, 1] may leave the range by an ulp)."""
    low, high = np.percentile(values, PERCENTILES)
    return {"mean": _clean(values.mean(), upper), "low": _clean(low, upper), "high": _clean(high, upper)}


def attach_heldout(
    tier_documents: Mapping[str, dict[str, Any]], heldout: Mapping[str, dict[str, Any]] | None
) -> None:
    """Put each tier's held-out document into its ``expected`` (in place); nothing for None."""
    if heldout is None:
        return
    for name, document in tier_documents.items():
        if name in heldout:
            document["expected"]["heldout"] = heldout[name]


def _clean(value: float, upper: float | None) -> float:
    clipped = max(0.0, float(value))
    return clipped if upper is None else min(upper, clipped)
