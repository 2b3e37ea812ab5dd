"""A policy's tiers on the questions they were calibrated on and on another population, against
their stated bounds (docs/calibrate.md#real-word-problems).

    PYTHONPATH=. .venv/bin/python bench/calibration/shifted_tiers.py POLICY.json \\
        --runs IN.jsonl.gz --shifted OTHER.jsonl.gz [--prices PRICES.yaml]

Per tier (its route and threshold as served, each answer scored by the policy's scorer under the
tier's commit rule, ``calibration.runs.load_runs``): quality, cost per request and escalation rate
on every question of ``--runs`` (the calibration's own questions: in sample) and of ``--shifted``
(never seen by calibration), the shifted quality's and escalation's 95% Wilson intervals, and
whether each shifted value lies inside the tier's bounds (``expected.bounds``). Prints Markdown.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from calibration.bounds import route_outcomes
from calibration.runs import RunsMatrix, load_runs
from policies import load_policy
from policies.commit import CommitRule
from replay.stats import wilson_interval


def tier_rows(policy_path: Path, runs: Path, shifted: Path, prices: Path | None) -> list[str]:
    """The table's rows, one per tier."""
    policy = load_policy(policy_path)
    cache: dict[tuple[Path, str], RunsMatrix] = {}

    def matrix(path: Path, commit: CommitRule | None) -> RunsMatrix:
        key = (path, "buffer" if commit is None else str(commit.document()))
        if key not in cache:
            scorer = policy.scorer
            cache[key] = load_runs(path, prices=prices, scorer=scorer.name, top_k=scorer.top_k, commit=commit)
        return cache[key]

    rows = []
    for name, tier in policy.tiers.items():
        commit = tier.commit if tier.commit is not None and tier.commit.rule == "prefix" else None
        own = _outcome(matrix(runs, commit), tier)
        other = _outcome(matrix(shifted, commit), tier)
        bounds = tier.expected.bounds
        low_q, high_q = wilson_interval(other[1] * other[3], int(other[3]))
        low_e, high_e = wilson_interval(other[2] * other[3], int(other[3]))
        verdict = "-"
        if bounds is not None:
            inside = [
                other[1] >= bounds.quality_min,
                other[0] <= bounds.cost_max,
                bounds.escalation[0] <= other[2] <= bounds.escalation[1],
            ]
            verdict = " / ".join("in" if ok else "**out**" for ok in inside)
            promised = (
                f">= {bounds.quality_min:.3f}, <= ${bounds.cost_max:.3g}, "
                f"[{bounds.escalation[0]:.1%}, {bounds.escalation[1]:.1%}]"
            )
        else:
            promised = "no bounds"
        rule = "buffer" if commit is None else f"prefix {commit.tokens}"
        rows.append(
            f"| {name} ({rule}) | {promised} | {own[1]:.3f} / ${own[0]:.3g} / {own[2]:.1%} "
            f"| {other[1]:.3f} [{low_q:.3f}, {high_q:.3f}] / ${other[0]:.3g} / {other[2]:.1%} "
            f"[{low_e:.1%}, {high_e:.1%}] | {verdict} |"
        )
    return rows


def _outcome(matrix: RunsMatrix, tier: object) -> tuple[float, float, float, float]:
    """(cost, quality, escalation rate, questions) of the tier's routes on every query."""
    outcomes = route_outcomes(matrix, tier, np.arange(matrix.n_queries))  # type: ignore[arg-type]
    return (
        float(outcomes.cost.mean()),
        float(outcomes.quality.mean()),
        float(outcomes.escalated.mean()),
        float(matrix.n_queries),
    )


def main() -> None:
    """Print the table (module docstring)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("policy", type=Path)
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--shifted", type=Path, required=True)
    parser.add_argument("--prices", type=Path)
    args = parser.parse_args()
    print(f"\n{args.policy}: calibration questions ({args.runs.name}) against {args.shifted.name}\n")
    print(
        "| tier | promised (quality, cost, escalation) | calibration questions: quality / cost / "
        "escalation | shifted: quality [95%] / cost / escalation [95%] | shifted inside: q / c / e |"
    )
    print("|---|---|---|---|---|")
    for row in tier_rows(args.policy, args.runs, args.shifted, args.prices):
        print(row)


if __name__ == "__main__":
    main()
