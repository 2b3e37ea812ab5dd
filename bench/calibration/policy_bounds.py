"""The bounds policy files state per tier (``expected.bounds``), as a markdown table.

Run from the repository root (the table in docs/calibrate.md#bounds):

    .venv/bin/python bench/calibration/policy_bounds.py policies/local-demo.json \\
        policies/local-steps-hosted.json
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from policies import load_policy  # noqa: E402


def rows(path: Path) -> list[str]:
    """One markdown row per tier of the policy at ``path`` (its top level)."""
    policy = load_policy(path)
    lines = []
    for name, tier in policy.tiers.items():
        b = tier.expected.bounds
        if b is None:
            lines.append(f"| {path.name} | {name} | no bounds | | | | | |")
            continue
        verdict = (
            "yes" if b.target_certified else (f"no, ~{b.more_queries:,} more" if b.more_queries else "no")
        )
        commit = f" ({tier.commit.rule} {tier.commit.tokens})" if tier.commit and tier.commit.tokens else ""
        lines.append(
            f"| {path.name} | {name}{commit} | {b.quality_min:.3f} | ${b.cost_max:.3g} "
            f"| [{b.escalation[0]:.1%}, {b.escalation[1]:.1%}] | n={b.n}, {b.statements} statements "
            f"| {b.target} | {verdict} |"
        )
    return lines


def main(argv: list[str]) -> None:
    """Print the table for the policy files named on the command line."""
    print("| policy | tier | quality >= | cost <= | escalation in | certified on | target | proven |")
    print("|---|---|---|---|---|---|---|---|")
    for name in argv:
        for line in rows(Path(name)):
            print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
