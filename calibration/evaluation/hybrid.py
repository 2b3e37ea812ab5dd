"""The router with principal components, and route-then-cascade, on the held-out protocol.

Per split, the router (``calibration.routing.fit``) is fitted on the calibration rows; the routed
mechanism's price weights (``calibration.routing.routed``) or route-then-cascade's candidates
(``calibration.routing.hybrid``: a pair, the router probability below which the strong model is
called directly, the cascade threshold) are measured on those rows. Per budget the best calibration
candidate is chosen and scored on the test rows with the same router and candidate.
"""

from __future__ import annotations

import numpy as np

from calibration.evaluation.budget import (
    SplitCurve,
    choose_within_budget,
    compact_choices,
    curve_from_choices,
)
from calibration.evaluation.router import routed_split_curve
from calibration.routing.fit import fit_linear_router
from calibration.routing.hybrid import hybrid_candidates, hybrid_outcomes
from calibration.runs import RunsMatrix
from calibration.splits import Split
from policies.router import LinearRouter


def _fit(matrix: RunsMatrix, rows: np.ndarray, components: int | None, seed: int) -> LinearRouter:
    if matrix.features is None:
        raise ValueError("the router needs per-query features")
    return fit_linear_router(
        matrix.features[rows],
        matrix.quality[rows],
        matrix.models,
        "features",
        components=components,
        seed=seed,
    )


def hybrid_split_curve(
    matrix: RunsMatrix, split: Split, grid: np.ndarray, *, components: int | None, seed: int = 0
) -> SplitCurve:
    """Route-then-cascade chosen per budget on calibration rows, scored on test rows."""
    router = _fit(matrix, split.calibration, components, seed)
    assert matrix.features is not None
    cal_p = router.probabilities(matrix.features[split.calibration])
    candidates = hybrid_candidates(matrix, split.calibration, cal_p)
    chosen = choose_within_budget(candidates.cost, candidates.quality, grid)
    unique, remapped = compact_choices(chosen)
    if unique.size == 0:
        return SplitCurve.undefined(grid.size)
    test_p = router.probabilities(matrix.features[split.test])
    test_cost, test_quality = hybrid_outcomes(matrix, split.test, test_p, candidates, unique)
    return curve_from_choices(remapped, test_cost, test_quality)


def linear_router_split_curve(
    matrix: RunsMatrix, split: Split, grid: np.ndarray, *, components: int | None, seed: int = 0
) -> SplitCurve:
    """The routed mechanism as served (``policies.router``): lambda chosen per budget on calibration."""
    router = _fit(matrix, split.calibration, components, seed)
    features = matrix.features
    assert features is not None
    return routed_split_curve(matrix, split, grid, lambda rows: router.probabilities(features[rows]))
