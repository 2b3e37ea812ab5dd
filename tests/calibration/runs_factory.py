"""Small hand-made RunsMatrix objects for calibration tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from calibration.runs import RunsMatrix


def make_matrix(
    models: Sequence[str],
    quality: Sequence[Sequence[float]],
    cost: Sequence[Sequence[float]],
    score: Sequence[Sequence[float]],
) -> RunsMatrix:
    """A matrix from per-model lists (outer: models in cost order, inner: queries)."""
    quality_array = np.asarray(quality, dtype=np.float64).T
    return RunsMatrix(
        models=tuple(models),
        query_ids=np.array([f"q{i}" for i in range(quality_array.shape[0])]),
        quality=quality_array,
        cost=np.asarray(cost, dtype=np.float64).T,
        score=np.asarray(score, dtype=np.float64).T,
    )


def four_model_example() -> RunsMatrix:
    """Models A (cost 1), B (2), D (5, dominated by B), C (10) on 4 queries.

    Worked out by hand (see test_envelope): the envelope is A (1, 0.5), A->B @ 0.2 (1.5, 0.75),
    B->C @ 0.5 (4.5, 1.0).
    """
    n = 4
    return make_matrix(
        ["A", "B", "D", "C"],
        quality=[[1, 0, 0, 1], [1, 1, 0, 1], [0, 0, 0, 1], [1, 1, 1, 1]],
        cost=[[1] * n, [2] * n, [5] * n, [10] * n],
        score=[[0.9, 0.1, 0.2, 0.8], [0.7, 0.6, 0.3, 0.5], [0.5] * n, [0.9] * n],
    )
