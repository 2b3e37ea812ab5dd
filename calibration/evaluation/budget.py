"""Choose a candidate per budget on calibration data; read its outcome on test data.

Shapes: ``m`` candidates, ``G`` grid points. Costs are mean USD per query, qualities mean
quality in [0, 1].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A candidate whose calibration cost exceeds the budget only by float rounding of a mean (e.g.
# a constant-cost model whose mean is 1 ulp above the grid end) still fits that budget.
BUDGET_RTOL = 1e-9


@dataclass(frozen=True)
class SplitCurve:
    """Test-half outcome of one method on one split, per budget on the cost grid.

    ``quality[g]`` / ``cost[g]``: mean test quality / mean test cost per query of the route
    chosen on calibration for budget ``grid[g]``; NaN where no calibration candidate fits.
    """

    quality: np.ndarray
    cost: np.ndarray

    @classmethod
    def undefined(cls, n_grid: int) -> SplitCurve:
        """A curve defined nowhere (e.g. a method that cannot run on this split)."""
        return cls(np.full(n_grid, np.nan), np.full(n_grid, np.nan))


def choose_within_budget(cal_cost: np.ndarray, cal_quality: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """For each budget in ``grid`` (G,), the index of the best candidate within it, or -1.

    Best = highest calibration quality among candidates with calibration cost <= budget; ties go
    to the cheaper candidate (then the lower index). Exact and vectorized: one sort, a running
    arg-max and a binary search, O((m + G) log m).
    """
    cal_cost = np.asarray(cal_cost, dtype=np.float64)
    cal_quality = np.asarray(cal_quality, dtype=np.float64)
    grid = np.asarray(grid, dtype=np.float64)
    if cal_cost.size == 0:
        return np.full(grid.shape, -1, dtype=np.int64)
    order = np.lexsort((-cal_quality, cal_cost))  # by cost, then best quality first
    quality_sorted = cal_quality[order]
    running_max = np.maximum.accumulate(quality_sorted)
    is_new_best = np.empty(order.size, dtype=bool)
    is_new_best[0] = True
    is_new_best[1:] = quality_sorted[1:] > running_max[:-1]
    best_so_far = np.maximum.accumulate(np.where(is_new_best, np.arange(order.size), 0))
    position = np.searchsorted(cal_cost[order], grid * (1.0 + BUDGET_RTOL), side="right") - 1
    chosen = np.full(grid.shape, -1, dtype=np.int64)
    fits = position >= 0
    chosen[fits] = order[best_so_far[position[fits]]]
    return chosen


def curve_from_choices(chosen: np.ndarray, test_cost: np.ndarray, test_quality: np.ndarray) -> SplitCurve:
    """Spread per-candidate test outcomes ``(m,)`` over the grid by ``chosen`` indices ``(G,)``."""
    quality = np.full(chosen.shape, np.nan)
    cost = np.full(chosen.shape, np.nan)
    fits = chosen >= 0
    quality[fits] = np.asarray(test_quality, dtype=np.float64)[chosen[fits]]
    cost[fits] = np.asarray(test_cost, dtype=np.float64)[chosen[fits]]
    return SplitCurve(quality, cost)


def compact_choices(chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct chosen candidates and the grid's index into them: ``(unique (u,), remapped (G,))``.

    Lets a method evaluate on test only the candidates some budget actually chose; ``-1`` stays.
    """
    unique, inverse = np.unique(chosen, return_inverse=True)
    remapped = inverse.astype(np.int64)
    if unique.size and unique[0] == -1:
        unique = unique[1:]
        remapped = remapped - 1
    return unique, remapped
