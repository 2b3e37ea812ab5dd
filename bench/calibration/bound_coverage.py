"""How often fresh questions land inside the bounds calibration states (docs/calibrate.md#bounds).

For each of ``--repeats`` random draws, the runs' queries are split into a calibration set
(``--calibration-fraction`` of them) and a *fresh* set the calibration never sees. ``cascade
calibrate``'s own code (``calibration.policy.calibrate`` with bounds) calibrates on the calibration
set: each tier's served route (chosen on all of that set) and its bounds (route chosen on one half
of it, certified on the other). The served route is then run on the fresh set, and each statement
is checked there: fresh mean quality >= ``quality_min``, fresh mean cost <= ``cost_max``, fresh
escalation rate within ``escalation``, and all of them at once. The table gives, per tier, the
mean stated bounds, the mean fresh values and the share of draws in which fresh data landed
inside, against the confidence the bounds were stated at; and the share of draws in which the served
route's mean over *every* query of the runs (the population these draws come from, what a bound on
the mean speaks of) lies inside all of them.

The fresh set is finite, so its own sampling noise counts against the bounds: a bound on the mean
of all future questions covers a finite fresh mean somewhat less often than it covers the true mean.

Run from the repository root (results in docs/calibrate.md):

    .venv/bin/python bench/calibration/bound_coverage.py data/local/arithmetic-runs.jsonl.gz \\
        --tiers data/local/arithmetic-tiers.yaml --scorer min_probability --top-k 10
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from calibration.bounds import BoundSettings, route_outcomes  # noqa: E402
from calibration.policy.calibrate import calibrate  # noqa: E402
from calibration.policy.commit_choice import parse_grid  # noqa: E402
from calibration.runs import RunsMatrix, load_runs  # noqa: E402
from calibration.tiers import load_tiers  # noqa: E402

STATEMENTS = ("covered_quality", "covered_cost", "covered_escalation", "covered_all", "covered_population")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (module docstring)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", type=Path)
    parser.add_argument("--tiers", type=Path, required=True)
    parser.add_argument("--prices", type=Path)
    parser.add_argument("--scorer")
    parser.add_argument("--top-k", type=int)
    parser.add_argument("--commit", help="serve every tier under this prefix rule, e.g. 8 (as --commit-grid)")
    parser.add_argument("--alternatives", type=int, default=1, help="as BoundSettings.alternatives")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--calibration-fraction", type=float, default=0.6)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def coverage(matrix: RunsMatrix, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Per tier: mean stated bounds, mean fresh values and the share of draws inside each bound."""
    spec = load_tiers(args.tiers)
    rng = np.random.default_rng(args.seed)
    size = round(args.calibration_fraction * matrix.n_queries)
    hits = {tier: np.zeros(len(STATEMENTS)) for tier in spec.tiers}
    sums = {tier: np.zeros(6) for tier in spec.tiers}
    for repeat in range(args.repeats):
        order = rng.permutation(matrix.n_queries)
        chosen, fresh = np.sort(order[:size]), np.sort(order[size:])
        settings = BoundSettings(confidence=args.confidence, seed=repeat, alternatives=args.alternatives)
        calibrated = calibrate(matrix.subset(chosen), spec, bounds=settings)
        assert calibrated.bounds is not None
        for tier, solution in calibrated.solutions.items():
            bounds = calibrated.bounds[tier]
            outcome = route_outcomes(matrix, solution, fresh)
            quality, cost, escalation = outcome.quality.mean(), outcome.cost.mean(), outcome.escalated.mean()
            inside = _inside(bounds, quality, cost, escalation)
            # The route's mean over every query of the runs: the population of this experiment.
            whole = route_outcomes(matrix, solution, np.arange(matrix.n_queries))
            population = _inside(bounds, whole.quality.mean(), whole.cost.mean(), whole.escalated.mean())
            hits[tier] += np.array([*inside, all(inside), all(population)], dtype=float)
            low, high = bounds["escalation"]
            sums[tier] += [bounds["quality_min"], quality, bounds["cost_max"], cost, low, high]
    return {
        tier: {
            **dict(zip(STATEMENTS, hits[tier] / args.repeats, strict=True)),
            **dict(
                zip(
                    ("quality_min", "quality", "cost_max", "cost", "escalation_low", "escalation_high"),
                    sums[tier] / args.repeats,
                    strict=True,
                )
            ),
        }
        for tier in spec.tiers
    }


def _inside(bounds: dict[str, Any], quality: float, cost: float, escalation: float) -> list[bool]:
    low, high = bounds["escalation"]
    return [quality >= bounds["quality_min"], cost <= bounds["cost_max"], low <= escalation <= high]


def main(argv: list[str] | None = None) -> None:
    """Print the coverage table (markdown)."""
    args = parse_args(argv)
    rule = parse_grid(args.commit)[0] if args.commit else None
    matrix = load_runs(args.runs, prices=args.prices, scorer=args.scorer, top_k=args.top_k, commit=rule)
    started = time.perf_counter()
    table = coverage(matrix, args)
    elapsed = time.perf_counter() - started
    size = round(args.calibration_fraction * matrix.n_queries)
    print(
        f"{args.runs}: {matrix.n_queries} queries; {args.repeats} draws of {size} calibration / "
        f"{matrix.n_queries - size} fresh queries; bounds at {args.confidence:.0%}"
        f"{f' (union over {args.alternatives} alternatives)' if args.alternatives > 1 else ''}"
        f"{f', served under prefix rule {args.commit}' if rule else ''}; {elapsed:.1f} s"
    )
    print()
    print(
        "| tier | quality >= (mean) | fresh quality | cost <= (mean) | fresh cost | escalation in (mean) "
        "| fresh inside: quality | cost | escalation | all | population inside | target |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for tier, row in table.items():
        print(
            f"| {tier} | {row['quality_min']:.3f} | {row['quality']:.3f} | ${row['cost_max']:.3g} "
            f"| ${row['cost']:.3g} | [{row['escalation_low']:.1%}, {row['escalation_high']:.1%}] "
            f"| {row['covered_quality']:.0%} | {row['covered_cost']:.0%} | {row['covered_escalation']:.0%} "
            f"| **{row['covered_all']:.0%}** | **{row['covered_population']:.0%}** | {args.confidence:.0%} |"
        )


if __name__ == "__main__":
    main()
