"""Baseline: the full fixed cost-ordered chain over the calibration pool, thresholds searched.

The chain calls every non-dominated model (on the calibration rows) in cost order; its k-1
thresholds are tuned on calibration by NSGA-II (as in the paper) or random search. A chain
that must pass through every intermediate model pays for each call, which is why it trails the
pairwise envelope.
"""

from __future__ import annotations

import numpy as np

from calibration.envelope import non_dominated_models
from calibration.evaluation.budget import SplitCurve
from calibration.evaluation.candidates import Candidates, heldout_curve
from calibration.evaluation.search import SEARCHES, ChainScorer, ChainSpace, ProgressCallback
from calibration.runs import RunsMatrix
from calibration.splits import Split


def fixed_chain_candidates(
    matrix: RunsMatrix,
    rows: np.ndarray,
    *,
    trials: int,
    seed: int,
    search: str = "nsga2",
    on_progress: ProgressCallback | None = None,
) -> Candidates:
    """Threshold settings of the full pool chain, measured on ``rows`` (calibration)."""
    pool = tuple(non_dominated_models(matrix, rows))
    scorer = ChainScorer(matrix, rows, ChainSpace([pool]))
    if len(pool) == 1:  # nothing to chain: the one model is the whole chain
        if on_progress is not None:
            on_progress(trials)
        return scorer.score(np.zeros(1, dtype=int), np.zeros((1, 1)))
    return SEARCHES[search](scorer, trials, seed, on_progress)


def fixed_chain_split_curve(
    matrix: RunsMatrix,
    split: Split,
    grid: np.ndarray,
    *,
    trials: int,
    seed: int,
    on_progress: ProgressCallback | None = None,
) -> SplitCurve:
    """Chain thresholds searched on calibration rows; each budget's choice scored on test rows."""
    candidates = fixed_chain_candidates(
        matrix, split.calibration, trials=trials, seed=seed, on_progress=on_progress
    )
    return heldout_curve(matrix, candidates, split.test, grid)
