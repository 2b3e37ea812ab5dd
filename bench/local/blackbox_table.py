"""The scorers-without-logprobs table of docs/scorers.md: each scorer of the demo's scored stage,
held out, with the black-box scorers' extra cost counted.

For each scorer: AUROC of the scored model's score against its correctness, the normalized gain of
the envelope held out (``cascade evaluate``, 50 splits), that gain as a share of
``min_probability``'s (from the chord between the cheapest and the best model, and from the single
models' own held-out curve, i.e. what routing adds), the same gain had the extra calls cost nothing
(the scorer's signal alone), the extra cost and latency of scoring one answer (from the recorded
calls), and the balanced and quality tiers' held-out quality and cost. Run from the repository root::

    .venv/bin/python bench/local/blackbox_table.py
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from localpool.heldout_table import build_table

RUNS = "data/local/arithmetic-blackbox-runs.jsonl.gz"
VERIFIER_15B_RUNS = "data/local/arithmetic-blackbox-verifier15-runs.jsonl.gz"
TIERS = Path("data/local/arithmetic-tiers.yaml")
SCORED = "qwen1.5b-fast"
BASELINE = "min_probability"

# (label, runs file, scorer arguments of cascade evaluate, key in scorer_calls or None)
ROWS: list[tuple[str, str, list[str], str | None]] = [
    ("min_probability (logprobs)", RUNS, ["--scorer", "min_probability", "--top-k", "10"], None),
    ("mean_token_negentropy (logprobs)", RUNS, ["--scorer", "mean_token_negentropy", "--top-k", "10"], None),
    ("verifier qwen2.5-coder-0.5b", RUNS, ["--scorer", "verifier"], "verifier"),
    ("verifier qwen2.5-coder-1.5b", VERIFIER_15B_RUNS, ["--scorer", "verifier"], "verifier"),
    (
        "consistency k=1, numeric",
        RUNS,
        ["--scorer", "consistency", "--equivalence", "numeric", "--samples", "1"],
        "consistency",
    ),
    (
        "consistency k=2, numeric",
        RUNS,
        ["--scorer", "consistency", "--equivalence", "numeric", "--samples", "2"],
        "consistency",
    ),
    ("self_report", VERIFIER_15B_RUNS, ["--scorer", "self_report"], "self_report"),
]


def _rows(path: str) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def extra_cost_and_latency(path: str, key: str, samples: int | None) -> tuple[float, float]:
    """Mean extra cost (USD) and mean extra latency (ms, calls one after the other) per scored answer."""
    costs, latencies = [], []
    for row in _rows(path):
        calls = (row.get("scorer_calls") or {}).get(key)
        if row["model"] != SCORED or not isinstance(calls, dict):
            continue
        latency = calls.get("latency_ms", 0.0)
        if isinstance(latency, list):  # consistency: one latency per sample
            recorded = len(latency)
            used = samples or recorded
            latency = sum(latency[:used])
            costs.append(calls.get("cost_usd", 0.0) * used / recorded)
        else:
            costs.append(calls.get("cost_usd", 0.0))
        latencies.append(latency)
    return statistics.fmean(costs), statistics.fmean(latencies)


def free_calls_copy(runs: str, out: Path) -> str:
    """A copy of the runs whose recorded extra calls cost nothing: the gain a scorer's signal alone gives."""
    with gzip.open(out, "wt", encoding="utf-8") as handle:
        for row in _rows(runs):
            for call in (row.get("scorer_calls") or {}).values():
                if isinstance(call, dict):
                    call["cost_usd"] = 0.0
            handle.write(json.dumps(row) + "\n")
    return str(out)


def evaluate(runs: str, scorer_args: list[str], report: Path, splits: int) -> dict[str, Any]:
    """``cascade evaluate`` (envelope and single models) and the summary it writes."""
    command = [sys.executable, "-m", "cascade_cli.main", "evaluate", runs, *scorer_args]
    command += [
        "--splits",
        str(splits),
        "--seed",
        "0",
        "--methods",
        "envelope,envelope_hull,single",
        "--report",
        str(report),
    ]
    subprocess.run(command, check=True, capture_output=True)
    return json.loads((report / "summary.json").read_text())


def main(argv: list[str] | None = None) -> None:
    """Print the Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=50)
    parser.add_argument("--runs", default=RUNS, help="runs with the 0.5B verifier, samples, self-reports")
    parser.add_argument("--verifier-runs", default=VERIFIER_15B_RUNS, help="runs with the 1.5B verifier")
    args = parser.parse_args(argv)
    files = {RUNS: args.runs, VERIFIER_15B_RUNS: args.verifier_runs}
    print(
        "| scorer | AUROC | held-out envelope gain | share of min_probability's gain "
        "| share of its gain over the single models | gain if its calls were free "
        "| extra cost / scored answer | (share of the stage's cost) | extra latency / scored answer "
        "| balanced tier: quality, cost | quality tier: quality, cost |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    baseline_gain = None
    with tempfile.TemporaryDirectory() as tmp:
        for index, (label, default_runs, scorer_args, key) in enumerate(ROWS):
            runs = files[default_runs]
            if not Path(runs).exists():
                print(f"| {label} | (no runs: {runs}) | | | | | | | | | |")
                continue
            summary = evaluate(runs, scorer_args, Path(tmp) / f"report-{index}", args.splits)
            table = build_table(Path(tmp) / f"report-{index}", TIERS)
            model = next(m for m in summary["models"] if m["model"] == SCORED)
            gain = summary["methods"]["envelope"]["normalized_gain"]
            singles = summary["methods"]["single"]["normalized_gain"]
            if baseline_gain is None and BASELINE in label:
                baseline_gain = gain
            share = f"{gain / baseline_gain:.0%}" if baseline_gain else "-"
            # Measured from the single models' curve instead of the chord: what routing adds.
            over_singles = f"{(gain - singles) / (baseline_gain - singles):.0%}" if baseline_gain else "-"
            held_out = {t["tier"]: t for t in table["tiers"] if t["method"] == "envelope"}
            balanced, quality = held_out["balanced"], held_out["quality"]
            free = "-"
            if key is not None:
                copy = free_calls_copy(runs, Path(tmp) / f"free-{index}.jsonl.gz")
                free_gain = evaluate(copy, scorer_args, Path(tmp) / f"free-{index}", args.splits)
                free = f"{free_gain['methods']['envelope']['normalized_gain']:.3f}"
            if key is None:
                extra = "$0 | 0% | 0 ms"
            else:
                samples = (
                    int(scorer_args[scorer_args.index("--samples") + 1])
                    if "--samples" in scorer_args
                    else None
                )
                cost, latency = extra_cost_and_latency(runs, key, samples)
                extra = f"${cost:.3g} | {cost / model['mean_cost_usd']:.0%} | {latency:,.0f} ms"
            print(
                f"| {label} | {model['auroc']:.3f} | {gain:.3f} | {share} | {over_singles} | {free} | "
                f"{extra} | "
                f"{balanced['quality']:.3f}, ${balanced['cost_usd']:.3g} | "
                f"{quality['quality']:.3f}, ${quality['cost_usd']:.3g} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
