"""Baseline: the optimized subsequence cascade (paper: "optimal subsequence", k-cascade).

Search space: every cost-ordered subsequence of the calibration pool with 1 to ``max_stages``
models (the paper: 2 to 4; single models are included so that a budget between chains can fall
back to one model, as every other method can), with a threshold per escalating stage. Searched
on calibration rows by Optuna NSGA-II or random search; chosen per budget on calibration and
scored on test like every method.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from calibration.envelope import non_dominated_models
from calibration.evaluation.budget import SplitCurve
from calibration.evaluation.candidates import heldout_curve
from calibration.evaluation.search import SEARCHES, ChainScorer, ChainSpace, ProgressCallback
from calibration.runs import RunsMatrix
from calibration.splits import Split

MAX_STAGES = 4


def subsequence_space(pool: list[str], max_stages: int = MAX_STAGES) -> ChainSpace:
    """Every subsequence of the cost-ordered ``pool`` with 1..max_stages models, order kept."""
    sizes = range(1, min(max_stages, len(pool)) + 1)
    sequences = [tuple(combo) for size in sizes for combo in combinations(pool, size)]
    return ChainSpace(sequences)


def subsequence_split_curve(
    matrix: RunsMatrix,
    split: Split,
    grid: np.ndarray,
    *,
    trials: int,
    seed: int,
    search: str = "nsga2",
    on_progress: ProgressCallback | None = None,
) -> SplitCurve:
    """Subsequences and thresholds searched on calibration rows; each budget's choice scored on test."""
    pool = non_dominated_models(matrix, split.calibration)
    scorer = ChainScorer(matrix, split.calibration, subsequence_space(pool))
    candidates = SEARCHES[search](scorer, trials, seed, on_progress)
    return heldout_curve(matrix, candidates, split.test, grid)
