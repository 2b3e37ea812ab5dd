"""Timing of ``cascade evaluate`` pieces on plaut-mc's largest set (12 models x 6,000 MMLU queries).

    .venv/bin/python bench/evaluate_bench.py            # from the repository root
    .venv/bin/python bench/evaluate_bench.py --search-splits 2 --paper-trials 2000

Measures (wall clock, best and median of --repeat runs, runs table loaded once beforehand):
  1. the 50-split held-out envelope evaluation: per split, envelope on the calibration half and
     every budget's route scored on the test half (500-point grid), no searches;
  2. the same plus the best-single-model baseline and the pair diagnostics;
  3. how much choosing the envelope on the test half (as the paper's code does) flatters it;
  4. per-trial cost of the searches (fixed chain and subsequence, NSGA-II and random search) at
     --trials and at the paper's 2,000 trials, and the extrapolated cost of the paper's protocol
     (2,000 trials x 50 splits, fixed chain + subsequence with NSGA-II).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

from calibration.evaluation.fixed_chain import fixed_chain_split_curve
from calibration.evaluation.heldout import envelope_split_curve
from calibration.evaluation.protocol import EvaluationSettings, cost_grid, endpoints, run_evaluation
from calibration.evaluation.subsequence import subsequence_split_curve
from calibration.metrics import cost_reduction, median_curve, normalized_gain
from calibration.runs import load_runs
from calibration.splits import Split, stratified_splits

REPO = Path(__file__).resolve().parents[1]
PLAUT = REPO / "data" / "plaut-mc"


def timed(function, repeat: int) -> tuple[float, float, float]:
    """(best wall, median wall, best CPU) seconds of ``repeat`` calls; CPU time of this process is
    the steadier number when other jobs share the cores."""
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        function()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), statistics.median(walls), min(cpus)


def report_selection_optimism(matrix, grid: np.ndarray, n_splits: int) -> None:
    """Gain and CR@90 of the envelope chosen on calibration (ours) vs chosen on test (paper's code)."""
    model_cost, model_quality = matrix.cost.mean(axis=0), matrix.quality.mean(axis=0)
    low_column, best_column = endpoints(model_cost, model_quality)
    low = (model_cost[low_column], model_quality[low_column])
    best = (model_cost[best_column], model_quality[best_column])
    splits = stratified_splits(matrix.n_queries, n_splits=n_splits, seed=0, strata=matrix.strata)
    held_out = np.array([envelope_split_curve(matrix, split, grid).quality for split in splits])
    on_test = np.array(
        [envelope_split_curve(matrix, Split(split.test, split.test), grid).quality for split in splits]
    )
    variants = (("chosen on calibration (held out)", held_out), ("chosen on test (paper)", on_test))
    for label, curves in variants:
        median = median_curve(curves)
        print(
            f"envelope {label:<33} gain {normalized_gain(grid, median, low, best):.3f}  "
            f"CR@90 {cost_reduction(grid, median, best):.1f}"
        )
    gap = median_curve(on_test) - median_curve(held_out)
    print(f"median curve, on-test minus held-out: max {np.nanmax(gap):.4f}, mean {np.nanmean(gap):.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=Path, default=PLAUT / "runs.csv.gz")
    parser.add_argument("--prices", type=Path, default=PLAUT / "prices.yaml")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--splits", type=int, default=50)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--paper-trials", type=int, default=2000)
    parser.add_argument("--search-splits", type=int, default=2, help="splits timed per search setting")
    args = parser.parse_args()

    matrix = load_runs(
        args.runs,
        prices=args.prices,
        score_column="score_msp",
        where={"dataset": "mmlu", "prompt_variant": "first"},
    )
    print(f"runs: {matrix.n_queries:,} queries x {len(matrix.models)} models ({args.runs})")
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")

    envelope_only = EvaluationSettings(splits=args.splits, methods=("envelope",))
    run_evaluation(matrix, envelope_only)  # warm-up: imports, caches
    best, median, cpu = timed(lambda: run_evaluation(matrix, envelope_only), args.repeat)
    print(
        f"{args.splits}-split held-out envelope (+ diagnostics): wall best {best:.3f} s, "
        f"median {median:.3f} s; CPU {cpu:.3f} s"
    )
    with_single = EvaluationSettings(splits=args.splits, methods=("envelope", "single"))
    best, median, cpu = timed(lambda: run_evaluation(matrix, with_single), args.repeat)
    print(
        f"{args.splits}-split envelope + best single model (+ diagnostics): "
        f"wall best {best:.3f} s, median {median:.3f} s; CPU {cpu:.3f} s"
    )

    grid = cost_grid(matrix.cost.mean(axis=0))
    report_selection_optimism(matrix, grid, args.splits)
    splits = stratified_splits(matrix.n_queries, n_splits=args.search_splits, seed=0, strata=matrix.strata)
    searches = {
        "fixed chain, NSGA-II": lambda split, trials: fixed_chain_split_curve(
            matrix, split, grid, trials=trials, seed=1
        ),
        "subsequence, NSGA-II": lambda split, trials: subsequence_split_curve(
            matrix, split, grid, trials=trials, seed=1, search="nsga2"
        ),
        "subsequence, random search": lambda split, trials: subsequence_split_curve(
            matrix, split, grid, trials=trials, seed=1, search="random"
        ),
    }
    per_split_at_paper: dict[str, float] = {}
    for label, run in searches.items():
        for trials in (args.trials, args.paper_trials):
            started = time.perf_counter()
            for split in splits:
                run(split, trials)
            per_split = (time.perf_counter() - started) / len(splits)
            print(
                f"{label:<28} {trials:>5} trials: {per_split:7.3f} s per split, "
                f"{1000 * per_split / trials:6.3f} ms per trial"
            )
            if trials == args.paper_trials:
                per_split_at_paper[label] = per_split
    paper = 50 * (per_split_at_paper["fixed chain, NSGA-II"] + per_split_at_paper["subsequence, NSGA-II"])
    print(
        f"paper protocol ({args.paper_trials} NSGA-II trials x 50 splits, fixed chain + subsequence): "
        f"~{paper / 60:.1f} min here (extrapolated from {args.search_splits} splits)"
    )
    print(f"numpy {np.__version__}")


if __name__ == "__main__":
    main()
