"""Summary numbers of an evaluation, and its machine-readable outputs (summary.json, curves.npz)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import numpy as np

from calibration.evaluation.protocol import METHOD_SHORT, EvaluationResult, MethodResult
from calibration.metrics import cost_reduction, median_curve, normalized_gain, percentile_band

PROTOCOL = (
    "For each split (stratified by the runs' dataset column when present), every method builds its "
    "routes on the calibration rows; for each budget g on the cost grid it takes the route with the "
    "highest calibration quality among those with calibration cost <= g, and the curve at g is that "
    "route's mean quality (and cost) on the test rows. Curves are medians over splits (NaNs ignored) "
    "with 10th-90th percentile bands. Normalized gain and CR@90 use full-data endpoints: the cheapest "
    "model and the highest-quality model."
)


def method_summary(result: EvaluationResult, method: MethodResult) -> dict:
    """Gain, CR@90 and budget-adherence numbers of one method (NaN-free JSON-friendly dict)."""
    low = (float(result.model_cost[result.low]), float(result.model_quality[result.low]))
    best = (float(result.model_cost[result.best]), float(result.model_quality[result.best]))
    median = median_curve(method.quality)
    with np.errstate(invalid="ignore", divide="ignore"):
        overrun = (method.cost - result.grid[None, :]) / result.grid[None, :]
    defined = np.isfinite(overrun)
    mid = result.grid.size // 2
    return {
        "label": method.label,
        "short": METHOD_SHORT[method.name],
        "skipped": method.skipped,
        "normalized_gain": _number(normalized_gain(result.grid, median, low, best)),
        "cr90_percent": _number(cost_reduction(result.grid, median, best)),
        "quality_at_max_budget": _number(median[-1]),
        "quality_at_mid_budget": _number(median[mid]),
        # How far realized test spend exceeds the budget chosen for: calibration-selected routes
        # can cost more on test. p90 over splits and budgets of (test cost - budget) / budget.
        "test_overrun_p90": _number(np.percentile(overrun[defined], 90)) if defined.any() else None,
        "seconds": round(method.seconds, 3),
    }


def summary_document(result: EvaluationResult, *, source: str, command: str | None = None) -> dict:
    """The summary.json document."""
    s = result.settings
    return {
        "runs": source,
        "command": command,
        "protocol": PROTOCOL,
        "settings": asdict(s) | {"methods": list(s.methods)},
        "n_queries": result.n_queries,
        "n_test_rows": result.n_test,
        "grid_usd": {
            "min": float(result.grid[0]),
            "max": float(result.grid[-1]),
            "points": int(result.grid.size),
        },
        "endpoints": {"low": _model_point(result, result.low), "best": _model_point(result, result.best)},
        "models": [
            {
                "model": name,
                "mean_cost_usd": float(result.model_cost[j]),
                "quality": float(result.model_quality[j]),
                "test_quality_median": float(np.median(result.single_test_quality[:, j])),
                "auroc": _number(result.auroc[name]),
            }
            for j, name in enumerate(result.models)
        ],
        "methods": {name: method_summary(result, method) for name, method in result.methods.items()},
        "pairs": [
            {
                "low": pair.low,
                "high": pair.high,
                "dominance_fraction": _number(pair.benefit.dominance_fraction),
                "decreasing_fraction": _number(pair.benefit.decreasing_fraction),
                "spearman_score_cost": _number(pair.spearman_score_cost),
            }
            for pair in result.pairs
        ],
        "notes": result.notes,
    }


def write_summary(
    result: EvaluationResult, directory: Path, *, source: str, command: str | None = None
) -> dict:
    """Write ``summary.json`` and ``curves.npz`` into ``directory``; returns the summary document."""
    directory.mkdir(parents=True, exist_ok=True)
    document = summary_document(result, source=source, command=command)
    (directory / "summary.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    arrays: dict[str, np.ndarray] = {
        "grid": result.grid,
        "models": np.array(result.models),
        "model_cost": result.model_cost,
        "model_quality": result.model_quality,
        "single_test_quality": result.single_test_quality,
    }
    for name, method in result.methods.items():
        if method.skipped:
            continue
        p10, p90 = percentile_band(method.quality)
        arrays |= {
            f"{name}_quality": method.quality,
            f"{name}_cost": method.cost,
            f"{name}_median": median_curve(method.quality),
            f"{name}_p10": p10,
            f"{name}_p90": p90,
        }
    for index, pair in enumerate(result.pairs):
        arrays |= {
            f"benefit_{index}_pair": np.array([pair.low, pair.high]),
            f"benefit_{index}_score": pair.benefit.score,
            f"benefit_{index}_quantile": pair.benefit.quantile,
            f"benefit_{index}_median": pair.benefit.median,
            f"benefit_{index}_p10": pair.benefit.low,
            f"benefit_{index}_p90": pair.benefit.high,
        }
    np.savez_compressed(directory / "curves.npz", allow_pickle=True, **arrays)
    return document


def _model_point(result: EvaluationResult, column: int) -> dict:
    return {
        "model": result.models[column],
        "cost_usd": float(result.model_cost[column]),
        "quality": float(result.model_quality[column]),
    }


def _number(value: float) -> float | None:
    """JSON has no NaN: undefined numbers become null."""
    value = float(value)
    return None if math.isnan(value) or math.isinf(value) else value
