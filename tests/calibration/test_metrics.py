"""Summary metrics: reproduce every cell of the paper's Table 2 from its cached held-out curves."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from calibration.metrics import cost_reduction, median_curve, normalized_gain, percentile_band
from tests.support.data_files import PAPER_CURVES

# Table 2 of the paper (normalized gain, CR@90), as printed in data/paper-curves/README.md.
TABLE_2: dict[str, dict[str, tuple[float, float]]] = {
    "envelope": {
        "mmlu": (0.360, 73.7),
        "triviaqa": (0.316, 74.5),
        "math_hard": (0.393, 79.5),
        "simpleqa": (0.158, 15.1),
        "livecodebench": (0.329, 56.1),
    },
    "fixed_chain": {
        "mmlu": (0.259, 59.3),
        "triviaqa": (0.249, 67.2),
        "math_hard": (0.344, 66.7),
        "simpleqa": (0.093, 1.3),
        "livecodebench": (0.277, 41.4),
    },
    "kcascade": {
        "mmlu": (0.360, 73.7),
        "triviaqa": (0.306, 74.5),
        "math_hard": (0.390, 79.5),
        "simpleqa": (0.156, 14.2),
        "livecodebench": (0.315, 51.2),
    },
    "router": {
        "mmlu": (0.393, 73.7),
        "triviaqa": (0.219, 59.9),
        "math_hard": (0.394, 81.2),
        "simpleqa": (0.193, 26.7),
        "livecodebench": (0.365, 64.9),
    },
}
CELLS = [(method, dataset) for method, row in TABLE_2.items() for dataset in row]


def _endpoints(coords_path: Path) -> tuple[tuple[float, float], tuple[float, float]]:
    coords = json.loads(coords_path.read_text())
    low = min(coords.values(), key=lambda cq: cq[0])
    best = max(coords.values(), key=lambda cq: cq[1])
    return (low[0], low[1]), (best[0], best[1])


@pytest.mark.parametrize(("method", "dataset"), CELLS, ids=[f"{m}-{d}" for m, d in CELLS])
def test_reproduces_paper_table_2_cell(method: str, dataset: str) -> None:
    folder = PAPER_CURVES / dataset
    grid = np.load(folder / "cost_grid.npy")
    curve = median_curve(np.load(folder / f"{method}_curves.npy"))
    low, best = _endpoints(folder / "model_coords.json")
    expected_gain, expected_cr = TABLE_2[method][dataset]

    assert round(normalized_gain(grid, curve, low, best), 3) == pytest.approx(expected_gain, abs=1e-9)
    assert round(cost_reduction(grid, curve, best), 1) == pytest.approx(expected_cr, abs=1e-9)


def test_gain_is_zero_for_the_straight_line_between_endpoints() -> None:
    grid = np.linspace(0.0, 2.0, 201)
    line = 0.2 + 0.3 * grid
    assert normalized_gain(grid, line, (0.0, 0.2), (2.0, 0.8)) == pytest.approx(0.0, abs=1e-12)


def test_gain_is_one_half_for_a_curve_at_best_quality_everywhere() -> None:
    grid = np.linspace(1.0, 3.0, 1001)
    assert normalized_gain(grid, np.full_like(grid, 0.9), (1.0, 0.5), (3.0, 0.9)) == pytest.approx(0.5)


def test_gain_ignores_undefined_points_and_points_outside_the_endpoints() -> None:
    grid = np.linspace(0.0, 4.0, 401)
    curve = np.where(grid <= 3.0, 0.9, 100.0)  # beyond c_best: must be ignored
    curve[:50] = np.nan  # undefined before g = 0.5
    gain = normalized_gain(grid, curve, (1.0, 0.5), (3.0, 0.9))
    assert gain == pytest.approx(0.5)


def test_gain_is_nan_when_the_endpoints_span_no_area() -> None:
    grid = np.linspace(0.0, 1.0, 11)
    assert np.isnan(normalized_gain(grid, np.ones(11), (0.0, 0.5), (1.0, 0.5)))
    assert np.isnan(normalized_gain(grid, np.ones(11), (1.0, 0.5), (1.0, 0.9)))


def test_cost_reduction_takes_the_first_grid_point_reaching_ninety_percent() -> None:
    grid = np.array([1.0, 2.0, 3.0, 4.0])
    curve = np.array([np.nan, 0.5, 0.75, 0.9])
    assert cost_reduction(grid, curve, (4.0, 0.8)) == pytest.approx(25.0)  # 0.75 >= 0.9 * 0.8 first at g=3


def test_cost_reduction_is_nan_when_never_reached() -> None:
    grid = np.array([1.0, 2.0])
    assert np.isnan(cost_reduction(grid, np.array([0.1, np.nan]), (2.0, 0.9)))


def test_median_and_band_ignore_nan_and_keep_unreached_points_nan() -> None:
    curves = np.array([[np.nan, 1.0, 2.0], [np.nan, 3.0, np.nan], [np.nan, 5.0, 4.0]])
    median = median_curve(curves)
    low, high = percentile_band(curves)
    assert np.isnan(median[0]) and median[1] == 3.0 and median[2] == 3.0
    assert np.isnan(low[0]) and low[1] == pytest.approx(1.4) and high[1] == pytest.approx(4.6)
