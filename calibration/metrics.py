"""Summary metrics of a cost-quality curve: normalized gain and cost reduction at 90% (CR@90).

Definitions are fixed by the paper (docs/evaluate.md, "Protocol (exact definitions)") and pinned by the
cached curves in ``data/paper-curves``, whose Table 2 they reproduce exactly.

A *curve* is one array of quality values on a cost grid (USD per query); NaN marks grid points
the curve does not reach. Endpoints are ``(cost_usd, quality)`` pairs: ``low`` is the cheapest
model, ``best`` the highest-quality model (both on full data in the paper).
"""

from __future__ import annotations

import warnings

import numpy as np

Point = tuple[float, float]


def median_curve(curves: np.ndarray) -> np.ndarray:
    """Median over splits, ignoring NaNs: ``(n_splits, n_grid) -> (n_grid,)``.

    A grid point that no split reaches stays NaN (without numpy's all-NaN warning).
    """
    curves = np.asarray(curves, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(curves, axis=0)


def percentile_band(
    curves: np.ndarray, low: float = 10.0, high: float = 90.0
) -> tuple[np.ndarray, np.ndarray]:
    """Per-grid-point ``(low, high)`` percentiles over splits, NaNs ignored: two ``(n_grid,)`` arrays."""
    curves = np.asarray(curves, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanpercentile(curves, low, axis=0), np.nanpercentile(curves, high, axis=0)


def _grid_and_curve(cost_grid: np.ndarray, curve: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    grid = np.asarray(cost_grid, dtype=np.float64)
    values = np.asarray(curve, dtype=np.float64)
    if grid.shape != values.shape or grid.ndim != 1:
        raise ValueError(f"cost_grid and curve must be 1-D of equal length: {grid.shape} vs {values.shape}")
    return grid, values


def normalized_gain(cost_grid: np.ndarray, curve: np.ndarray, low: Point, best: Point) -> float:
    """Area between ``curve`` and the straight line from ``low`` to ``best``, normalized.

    Trapezoid integral over the grid points with ``low_cost <= g <= best_cost`` where the curve
    is defined (not NaN) of ``curve(g) - line(g)``, divided by
    ``(best_cost - low_cost) * (best_quality - low_quality)``. 0 means no better than mixing
    the two models at random; 0.5 is the upper bound for a curve reaching ``best_quality`` at
    ``low_cost``. NaN when the endpoints span no area or fewer than two grid points qualify.
    """
    grid, values = _grid_and_curve(cost_grid, curve)
    (c_low, q_low), (c_best, q_best) = low, best
    area = (c_best - c_low) * (q_best - q_low)
    if not area > 0:
        return float("nan")
    mask = (grid >= c_low) & (grid <= c_best) & np.isfinite(values)
    if np.count_nonzero(mask) < 2:
        return float("nan")
    line = q_low + (q_best - q_low) * (grid[mask] - c_low) / (c_best - c_low)
    return float(np.trapezoid(values[mask] - line, grid[mask]) / area)


def cost_reduction(cost_grid: np.ndarray, curve: np.ndarray, best: Point, fraction: float = 0.9) -> float:
    """Cost reduction (percent) at which the curve first reaches ``fraction`` of the best quality.

    ``100 * (best_cost - g*) / best_cost`` where ``g*`` is the first grid point (in grid order,
    no interpolation) with ``curve(g) >= fraction * best_quality``. NaN if the curve never gets
    there. Negative when the curve needs more than the best model's cost.
    """
    grid, values = _grid_and_curve(cost_grid, curve)
    c_best, q_best = best
    with np.errstate(invalid="ignore"):
        reached = np.flatnonzero(np.isfinite(values) & (values >= fraction * q_best))
    if reached.size == 0 or not c_best > 0:
        return float("nan")
    return float(100.0 * (c_best - grid[reached[0]]) / c_best)
