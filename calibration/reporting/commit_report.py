"""The commit-rule study as a table: per tier and rule, held-out quality, cost, gain and first token.

``cascade calibrate --commit-grid`` prints it and, with ``--report DIR``, writes it as
``DIR/commit.md`` (the table docs/streaming.md quotes) and ``DIR/commit.json`` (every number).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.table import Table

from calibration.policy.commit_choice import CommitStudy, FirstToken, RuleResult

HEADERS = (
    "tier",
    "rule",
    "held-out quality",
    "held-out cost",
    "gain",
    "share of buffer gain",
    "first token accepted p50/p95",
    "escalated p50/p95",
    "cheap alone",
    "decided at (tokens)",
    "chosen",
)

TERMINAL_HEADERS = ("tier", "rule", "quality", "cost", "gain", "share", "TTFT acc", "TTFT esc", "at tok", "")


def _seconds(pair: tuple[float, float] | None) -> str:
    return "-" if pair is None else f"{pair[0]:.2f} / {pair[1]:.2f} s"


def _row(study: CommitStudy, tier: str, result: RuleResult) -> list[str]:
    held = result.heldout(tier)
    share = study.share(tier, result)
    timing: FirstToken = result.first_token[tier]
    return [
        tier,
        result.label,
        f"{held['quality']['mean']:.3f} [{held['quality']['low']:.3f}, {held['quality']['high']:.3f}]",
        f"${held['cost_usd']['mean']:.3g}",
        f"{result.gain[tier]:.3f}",
        "-" if share is None else f"{share:.0%}",
        _seconds(timing.accepted),
        _seconds(timing.escalated),
        f"{timing.cheap_alone:.2f} s",
        f"{timing.decided_tokens:.1f}",
        "yes" if study.chosen[tier] is result else "",
    ]


def rows(study: CommitStudy) -> list[list[str]]:
    """Every (tier, rule) row, tiers in file order, the buffered rule first."""
    return [_row(study, tier, result) for tier in study.chosen for result in study.results]


def commit_table(study: CommitStudy) -> Table:
    """The study for the terminal."""
    table = Table(
        title=(
            f"Commit rules, held out over {study.results[0].heldout(next(iter(study.chosen)))['splits']} "
            f"splits (prefix where it keeps >= {study.min_share:.0%} of the buffered gain)"
        )
    )
    # The terminal keeps the means and medians (commit.md has the intervals and the 95th percentiles).
    for header in TERMINAL_HEADERS:
        table.add_column(header)
    for tier in study.chosen:
        for result in study.results:
            held, timing, share = result.heldout(tier), result.first_token[tier], study.share(tier, result)
            table.add_row(
                tier,
                result.label,
                f"{held['quality']['mean']:.3f}",
                f"${held['cost_usd']['mean']:.3g}",
                f"{result.gain[tier]:.3f}",
                "-" if share is None else f"{share:.0%}",
                "-" if timing.accepted is None else f"{timing.accepted[0]:.2f} s",
                "-" if timing.escalated is None else f"{timing.escalated[0]:.2f} s",
                f"{timing.decided_tokens:.0f}",
                "chosen" if study.chosen[tier] is result else "",
            )
    return table


def markdown(study: CommitStudy) -> str:
    """The study as a Markdown table."""
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(row) + " |" for row in rows(study)]
    models = list(study.results[0].auroc)
    lines += ["", "| rule | " + " | ".join(f"AUROC {m}" for m in models) + " |"]
    lines += ["|---|" + "---|" * len(models)]
    lines += [
        f"| {result.label} | " + " | ".join(f"{result.auroc[m]:.3f}" for m in models) + " |"
        for result in study.results
    ]
    return "\n".join(lines) + "\n"


def document(study: CommitStudy) -> dict[str, Any]:
    """Every number of the study (commit.json)."""
    (c_low, q_low), (c_best, q_best) = study.endpoints
    out: dict[str, Any] = {
        "min_gain_share": study.min_share,
        "endpoints": {
            "low": {"cost_usd": c_low, "quality": q_low},
            "best": {"cost_usd": c_best, "quality": q_best},
        },
        "chosen": {
            tier: (result.rule.document() if result.rule is not None else {"rule": "buffer"})
            for tier, result in study.chosen.items()
        },
        "tiers": {},
    }
    for tier in study.chosen:
        out["tiers"][tier] = {
            result.label: {
                "commit": result.rule.document() if result.rule is not None else {"rule": "buffer"},
                "heldout": result.heldout(tier),
                "gain": result.gain[tier],
                "auroc": result.auroc,
                "share_of_buffer_gain": study.share(tier, result),
                "first_token_s": {
                    "accepted_p50_p95": result.first_token[tier].accepted,
                    "escalated_p50_p95": result.first_token[tier].escalated,
                    "cheap_alone": result.first_token[tier].cheap_alone,
                    "decided_tokens_mean": result.first_token[tier].decided_tokens,
                },
            }
            for result in study.results
        }
    return out


def write_commit_report(directory: Path, study: CommitStudy, command: str | None = None) -> Path:
    """``commit.md`` and ``commit.json`` in ``directory``; returns the Markdown file."""
    directory.mkdir(parents=True, exist_ok=True)
    page = directory / "commit.md"
    head = f"Command: `{command}`\n\n" if command else ""
    page.write_text(head + markdown(study), encoding="utf-8")
    (directory / "commit.json").write_text(json.dumps(document(study), indent=2) + "\n", encoding="utf-8")
    return page
