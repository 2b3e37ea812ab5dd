"""Figures of ``cascade evaluate``: held-out comparison of methods, escalation-benefit curves.

Built with matplotlib's object API (``matplotlib.figure.Figure``, no pyplot state), so they render
headless and never touch a global backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from calibration.metrics import median_curve, percentile_band
from calibration.reporting.labels import Label, place_labels

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from calibration.evaluation.protocol import EvaluationResult

MAX_BENEFIT_PANELS = 20
_COLORS = {
    "envelope": "#1f77b4",
    "envelope_hull": "#17becf",
    "single": "#7f7f7f",
    "fixed_chain": "#d62728",
    "subsequence_nsga2": "#2ca02c",
    "subsequence_random": "#98df8a",
    "router": "#9467bd",
    "hybrid": "#e377c2",
}


def heldout_comparison_figure(result: EvaluationResult, filters: str = "") -> Figure:
    """Median held-out quality per budget with 10th-90th percentile bands, one line per method;
    single models as points (full-data cost, median test quality, 10th-90th bar). ``filters``
    (e.g. ' (where dataset=mmlu)') is appended to the title."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9.5, 5.8))
    axes = figure.add_subplot()
    grid = result.grid
    for name, method in result.methods.items():
        if method.skipped:
            continue
        median = median_curve(method.quality)
        low, high = percentile_band(method.quality)
        color = _COLORS.get(name)
        style = "--" if name == "envelope_hull" else "-"
        axes.plot(grid, median, color=color, linestyle=style, linewidth=1.8, label=method.label)
        axes.fill_between(grid, low, high, color=color, alpha=0.15, linewidth=0)
    test = result.single_test_quality
    q10, q50, q90 = np.percentile(test, [10, 50, 90], axis=0)
    axes.errorbar(
        result.model_cost,
        q50,
        yerr=[q50 - q10, q90 - q50],
        fmt="o",
        color="black",
        markersize=4,
        capsize=2,
        linewidth=0.8,
        label="single models (test)",
    )
    axes.axhline(0.9 * result.model_quality[result.best], color="#bbbbbb", linestyle=":", linewidth=1)
    axes.set_xscale("log")
    axes.set_xlabel("budget: max expected cost, USD per query (log scale)")
    axes.set_ylabel("mean quality on the test half")
    axes.set_title(
        f"Held-out comparison{filters}\n{result.settings.splits} splits, "
        f"test fraction {result.settings.test_fraction:g}; dotted: 90% of the best model",
        fontsize=10,
    )
    axes.grid(True, which="both", alpha=0.25)
    axes.legend(fontsize=8, loc="lower right")
    figure.subplots_adjust(left=0.08, right=0.97, bottom=0.1, top=0.9)  # fixed: tight_layout is slow
    # Labels last, on the final layout, clear of lines, points, the legend and each other.
    labels = [
        Label(name, result.model_cost[j], q50[j], {"fontsize": 7, "color": "#444444"})
        for j, name in enumerate(result.models)
    ]
    place_labels(axes, labels, np.column_stack([result.model_cost, q50]))
    return figure


def benefit_figure(result: EvaluationResult) -> Figure:
    """Escalation benefit m_H(s) - m_L(s) per pool pair: median over splits' test halves, band."""
    from matplotlib.figure import Figure

    pairs = result.pairs[:MAX_BENEFIT_PANELS]
    n = max(1, len(pairs))
    columns = min(5, n)
    rows = (n + columns - 1) // columns
    height = 2.4 * rows + 0.6
    figure = Figure(figsize=(3.0 * columns, height))
    for index, pair in enumerate(pairs):
        axes = figure.add_subplot(rows, columns, index + 1)
        curve = pair.benefit
        # x = quantile of s_L: confidence scores crowd near 1, ranks spread the bins evenly.
        axes.fill_between(curve.quantile, curve.low, curve.high, color="#1f77b4", alpha=0.2, linewidth=0)
        axes.plot(curve.quantile, curve.median, color="#1f77b4", marker=".", markersize=3, linewidth=1.2)
        axes.axhline(0.0, color="black", linewidth=0.6)
        axes.set_title(f"{pair.low} → {pair.high}", fontsize=8)
        axes.text(
            0.98,
            0.95,
            f"dom {curve.dominance_fraction:.2f}\ndec {curve.decreasing_fraction:.2f}",
            transform=axes.transAxes,
            ha="right",
            va="top",
            fontsize=7,
        )
        axes.tick_params(labelsize=7)
    shown = ""
    if len(result.pairs) > MAX_BENEFIT_PANELS:
        shown = f" (first {MAX_BENEFIT_PANELS} of {len(result.pairs)})"
    figure.suptitle(
        f"Escalation benefit m_H(s) − m_L(s) against the quantile of the cheap model's score s{shown}; "
        "dom = share of bins with benefit > 0, dec = share of steps not increasing",
        fontsize=9,
    )
    figure.subplots_adjust(left=0.05, right=0.98, bottom=0.06, top=1 - 0.55 / height, hspace=0.45, wspace=0.3)
    return figure


def save_png(figure: Figure, path: str, dpi: int = 100) -> None:
    """Write a figure as PNG."""
    figure.savefig(path, format="png", dpi=dpi)
