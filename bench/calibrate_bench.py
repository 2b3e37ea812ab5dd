"""Time ``cascade calibrate`` on plaut-mc's largest set (12 models x 6,000 MMLU questions).

Splits the time into loading the runs (read + validate + pivot) and compute (pool, every pair
frontier at every threshold, envelope, hull, tiers, policy validation), in-process, and times
the whole command once as a subprocess. Run from the repository root:

    .venv/bin/python bench/calibrate_bench.py [--repeat 5] [--runs RUNS --prices PRICES]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIERS = REPO / "calibration/examples/tiers.yaml"
PLAUT = REPO / "data" / "plaut-mc"
WHERE = {"dataset": "mmlu", "prompt_variant": "first"}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--runs", type=Path, default=PLAUT / "runs.csv.gz")
    parser.add_argument("--prices", type=Path, default=PLAUT / "prices.yaml")
    args = parser.parse_args()
    runs, prices = args.runs, args.prices

    started = time.perf_counter()
    from calibration.envelope import compute_envelope
    from calibration.policy.policy_writer import build_calibrated_policy
    from calibration.runs import load_runs
    from calibration.tiers import load_tiers, solve_tiers

    imports = time.perf_counter() - started
    spec = load_tiers(TIERS)
    load_times, compute_times = [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        matrix = load_runs(runs, prices=prices, score_column="score_msp", where=WHERE)
        t1 = time.perf_counter()
        envelope = compute_envelope(matrix)
        solutions = solve_tiers(envelope, spec, randomize=True)
        build_calibrated_policy(matrix, envelope, solutions, spec.default_tier)
        t2 = time.perf_counter()
        load_times.append(t1 - t0)
        compute_times.append(t2 - t1)

    print(f"data: {os.path.relpath(runs)} --where dataset=mmlu --where prompt_variant=first")
    print(
        f"matrix: {matrix.n_queries} queries x {len(matrix.models)} models; pool {len(envelope.pool)}; "
        f"{len(envelope.pairs)} pairs; {len(envelope)} envelope points; {len(envelope.hull)} hull vertices"
    )
    print(f"imports (calibration modules): {imports:.2f} s")
    print(
        f"load    (read+validate+pivot): first {load_times[0]:.3f} s, "
        f"median {statistics.median(load_times):.3f} s over {args.repeat}"
    )
    print(
        f"compute (envelope+tiers+policy): first {compute_times[0]:.3f} s, "
        f"median {statistics.median(compute_times):.3f} s over {args.repeat}"
    )

    with tempfile.TemporaryDirectory() as tmp:
        command = [
            str(Path(sys.executable).with_name("cascade")),
            "calibrate",
            str(runs),
            "--prices",
            str(prices),
            "--score-column",
            "score_msp",
            "--where",
            "dataset=mmlu",
            "--where",
            "prompt_variant=first",
            "--tiers",
            str(TIERS),
            "-o",
            str(Path(tmp) / "policy.json"),
            "--randomize",
        ]
        t0 = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        print(f"whole command (subprocess, wall, incl. interpreter start): {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
