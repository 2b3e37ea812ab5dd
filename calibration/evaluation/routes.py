"""Mean cost and quality of many routes on a set of query rows, grouped for vectorized evaluation.

A route is ``(models, thresholds)``: one model (no cascade), a pair (L, H) with one threshold, or
a longer chain. Single models are column means; all thresholds of the same pair are scored in one
``pair_metrics_at`` call (sort + prefix sums); longer chains share one ``chain_outcomes`` call per
model sequence.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from calibration.evaluation.chains import chain_outcomes
from calibration.frontier import pair_metrics_at
from calibration.runs import RunsMatrix

Route = tuple[tuple[str, ...], tuple[float, ...]]


def route_outcomes(
    matrix: RunsMatrix, routes: Sequence[Route], rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(cost (m,), quality (m,))``: mean USD per query and mean quality of each route on ``rows``."""
    rows = np.asarray(rows)
    cost = np.empty(len(routes))
    quality = np.empty(len(routes))
    by_models: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for index, (models, thresholds) in enumerate(routes):
        if len(thresholds) != len(models) - 1:
            raise ValueError(f"route {models} needs {len(models) - 1} thresholds, got {len(thresholds)}")
        by_models[tuple(models)].append(index)

    for models, indices in by_models.items():
        columns = [matrix.model_index(name) for name in models]
        if len(columns) == 1:
            cost[indices] = matrix.cost[rows, columns[0]].mean()
            quality[indices] = matrix.quality[rows, columns[0]].mean()
            continue
        threshold_rows = np.array([routes[i][1] for i in indices], dtype=np.float64)
        if len(columns) == 2:
            low, high = columns
            curve = pair_metrics_at(
                matrix.score[rows, low],
                matrix.stage_cost(rows, [low])[:, 0],
                matrix.quality[rows, low],
                matrix.cost[rows, high],
                matrix.quality[rows, high],
                threshold_rows[:, 0],
                saving_l=None if matrix.escalation_saving is None else matrix.escalation_saving[rows, low],
            )
            cost[indices], quality[indices] = curve.cost, curve.quality
            continue
        block = np.ix_(rows, np.asarray(columns))
        chain_cost, chain_quality, _ = chain_outcomes(
            matrix.score[block],
            matrix.cost[block],
            matrix.quality[block],
            threshold_rows,
            scoring=matrix.scoring(rows, columns),
            saving=matrix.saving(rows, columns),
        )
        cost[indices], quality[indices] = chain_cost, chain_quality
    return cost, quality
