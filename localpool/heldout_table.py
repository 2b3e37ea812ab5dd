"""The held-out table of a demo policy, from a ``cascade evaluate`` report and the tiers file.

    .venv/bin/python -m localpool.heldout_table REPORT_DIR TIERS.yaml [-o TABLE.json]

For every single model (held-out median quality and mean cost), the envelope and its hull mixtures
at each tier's budget (median over the splits of the held-out quality and cost of the route chosen
on the calibration half, 10th-90th percentile of the quality), and the cheapest budget at which the
envelope's held-out median reaches 95% of the best single model's held-out quality. Prints a
Markdown table; ``-o`` also writes it as JSON (what ``cascade demo`` prints in its banner).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import yaml

METHODS = {"envelope": "envelope", "envelope_hull": "hull mixtures"}
TARGET_SHARE = 0.95


def _at_budget(curves: Any, method: str, budget: float) -> dict[str, float] | None:
    grid = curves["grid"]
    index = int(np.searchsorted(grid, budget, side="right")) - 1
    if index < 0 or f"{method}_quality" not in curves:
        return None
    quality = curves[f"{method}_quality"][:, index]
    cost = curves[f"{method}_cost"][:, index]
    if np.all(np.isnan(quality)):
        return None
    low, high = np.nanpercentile(quality, [10, 90])
    return {
        "quality": float(np.nanmedian(quality)),
        "quality_p10": float(low),
        "quality_p90": float(high),
        "cost_usd": float(np.nanmedian(cost)),
    }


def _reach(curves: Any, method: str, quality_target: float) -> dict[str, float] | None:
    """The cheapest grid budget whose held-out median quality reaches ``quality_target``."""
    medians = np.nanmedian(curves[f"{method}_quality"], axis=0)
    hits = np.flatnonzero(medians >= quality_target)
    if hits.size == 0:
        return None
    index = int(hits[0])
    return {
        "budget_usd": float(curves["grid"][index]),
        "quality": float(medians[index]),
        "cost_usd": float(np.nanmedian(curves[f"{method}_cost"][:, index])),
    }


def build_table(report: Path, tiers_file: Path) -> dict[str, Any]:
    """The held-out table as a JSON-ready dict."""
    summary = json.loads((report / "summary.json").read_text(encoding="utf-8"))
    tiers = yaml.safe_load(tiers_file.read_text(encoding="utf-8"))["tiers"]
    with np.load(report / "curves.npz") as loaded:
        curves = {key: loaded[key] for key in loaded.files}
    singles = [
        {"model": m["model"], "quality": m["test_quality_median"], "cost_usd": m["mean_cost_usd"]}
        for m in summary["models"]
    ]
    best = max(singles, key=lambda m: (m["quality"], -m["cost_usd"]))
    rows = []
    for tier, spec in tiers.items():
        budget = spec.get("max_cost_usd")
        if budget is None:
            continue
        for method, label in METHODS.items():
            point = _at_budget(curves, method, float(budget))
            if point is not None:
                rows.append({"tier": tier, "budget_usd": float(budget), "method": label, **point})
    reach = {
        label: _reach(curves, method, TARGET_SHARE * best["quality"])
        for method, label in METHODS.items()
        if f"{method}_quality" in curves
    }
    gains = {label: summary["methods"][method]["normalized_gain"] for method, label in METHODS.items()}
    return {
        "command": summary.get("command"),
        "splits": summary["settings"]["splits"],
        "n_queries": summary["n_queries"],
        "singles": singles,
        "best_single": best,
        "tiers": rows,
        "reach_95_percent_of_best": reach,
        "normalized_gain": gains,
    }


def markdown(table: dict[str, Any]) -> str:
    """The table as Markdown (quality = held-out median; cost = mean USD per question)."""
    best = table["best_single"]
    lines = [
        "| route | held-out quality [p10, p90] | cost / question | vs best single: quality, cost |",
        "|---|---|---|---|",
    ]
    for single in table["singles"]:
        lines.append(
            f"| {single['model']} alone | {single['quality']:.3f} | ${single['cost_usd']:.3g} | "
            f"{single['quality'] / best['quality']:.0%}, {single['cost_usd'] / best['cost_usd']:.0%} |"
        )
    for row in table["tiers"]:
        lines.append(
            f"| tier {row['tier']} (<= ${row['budget_usd']:.3g}), {row['method']} | {row['quality']:.3f} "
            f"[{row['quality_p10']:.3f}, {row['quality_p90']:.3f}] | ${row['cost_usd']:.3g} | "
            f"{row['quality'] / best['quality']:.0%}, {row['cost_usd'] / best['cost_usd']:.0%} |"
        )
    for label, point in table["reach_95_percent_of_best"].items():
        if point is None:
            lines.append(f"| {label}: 95% of best | not reached | | |")
        else:
            lines.append(
                f"| {label}: cheapest budget reaching 95% of best (${point['budget_usd']:.3g}) | "
                f"{point['quality']:.3f} | ${point['cost_usd']:.3g} | "
                f"{point['quality'] / best['quality']:.0%}, {point['cost_usd'] / best['cost_usd']:.0%} |"
            )
    gains = ", ".join(f"{label} {gain:.3f}" for label, gain in table["normalized_gain"].items())
    lines.append("")
    lines.append(f"Normalized gain ({table['splits']} splits, {table['n_queries']} questions): {gains}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Print the table; write it as JSON with ``-o``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("tiers", type=Path)
    parser.add_argument("-o", "--output", type=Path)
    args = parser.parse_args(argv)
    table = build_table(args.report, args.tiers)
    print(markdown(table))
    if args.output:
        args.output.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
