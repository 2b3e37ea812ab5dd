"""Per-model tables of a BFCL runs file: accuracy per category, invalid calls caught, AUROC of every scorer.

    .venv/bin/python bench/local/bfcl_table.py data/local/bfcl-runs.jsonl.gz [--top-k 15]

Prints Markdown tables (docs/bfcl.md):

* per model and category (the ``subject`` column): questions, accuracy, answers that failed the
  structural checks (``valid`` false), answers with no call, mean prompt / completion tokens,
  mean cost and median latency;
* per model, the AUROC of each logprob scorer (``policies.scorers``) for telling right answers from
  wrong ones, on every row (an invalid answer scores ``-inf``, as calibration scores it) and on the
  valid rows only (what the score alone must tell apart once the checks have done their part);
* with ``--policy POLICY.json``, per tier of that policy replayed on the runs (each route, as the
  gateway runs it: a stage's answer is accepted iff it is valid and its score is at least the
  stage's threshold; the last stage's answer is returned as it is): quality, cost, escalation rate,
  invalid answers accepted by a scored stage and invalid answers returned by a final stage.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from calibration.diagnostics import auroc
from collection.bfcl import CATEGORIES
from policies.scorers import SCORERS, score_logprobs


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The runs rows of a .jsonl or .jsonl.gz file."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def category_table(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown: one line per (model, category) and per model over all categories."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(row["model"], row.get("subject") or "-")].append(row)
        groups[(row["model"], "all")].append(row)
    lines = [
        "| model | category | questions | accuracy | invalid (checks) | no call | prompt / completion tokens "
        "| mean cost | median latency |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    order = [*CATEGORIES, "all"]
    for (model, category), members in sorted(
        groups.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1]) if kv[0][1] in order else -1)
    ):
        n = len(members)
        lines.append(
            f"| {model} | {category} | {n} | {sum(r['correct'] for r in members) / n:.3f} "
            f"| {sum(r.get('valid') is False for r in members)} "
            f"| {sum(not r.get('tool_calls') for r in members)} "
            f"| {statistics.mean(r['prompt_tokens'] for r in members):.0f} / "
            f"{statistics.mean(r['completion_tokens'] for r in members):.0f} "
            f"| ${statistics.mean(r['cost_usd'] for r in members):.3g} "
            f"| {statistics.median(r['latency_ms'] for r in members) / 1000:.1f} s |"
        )
    return lines


def scorer_table(rows: list[dict[str, Any]], top_k: int) -> list[str]:
    """Markdown: AUROC of each scorer per model, all rows (invalid = -inf) / valid rows only."""
    models = sorted({r["model"] for r in rows})
    header = "| scorer | " + " | ".join(f"{m}: all / valid only" for m in models) + " |"
    lines = [header, "|---|" + "---|" * len(models)]
    for scorer in SCORERS:
        cells = []
        for model in models:
            members = [r for r in rows if r["model"] == model]
            scores = np.array(
                [
                    -np.inf
                    if r.get("valid") is False
                    else (score_logprobs(r["logprobs"], scorer, top_k) or np.nan)
                    for r in members
                ]
            )
            correct = np.array([r["correct"] >= 0.5 for r in members])
            valid = np.array([r.get("valid") is not False for r in members])
            known = ~np.isnan(scores)
            cells.append(
                f"{auroc(scores[known], correct[known]):.3f} / "
                f"{auroc(scores[known & valid], correct[known & valid]):.3f}"
            )
        lines.append(f"| `{scorer}` | " + " | ".join(cells) + " |")
    return lines


def tier_table(rows: list[dict[str, Any]], policy_path: Path) -> list[str]:
    """Markdown: each tier of the policy on these runs, invalid answers accepted / returned."""
    policy = json.loads(policy_path.read_text())
    scorer, top_k = policy["scorer"]["name"], policy["scorer"]["top_k"]
    by_query: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in rows:
        by_query[row["query_id"]][row["model"]] = row
    lines = [
        "| tier | route | quality | cost / question | escalation | invalid accepted by a scored stage "
        "| invalid returned by the final stage |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, tier in policy["tiers"].items():
        quality = cost = escalated = accepted_invalid = returned_invalid = 0.0
        for route in tier["routes"]:
            weight = route["weight"]
            for answers in by_query.values():
                for stage, model in enumerate(route["models"]):
                    row = answers[model]
                    cost += weight * row["cost_usd"]
                    final = stage == len(route["models"]) - 1
                    valid = row.get("valid") is not False
                    score = score_logprobs(row["logprobs"], scorer, top_k)
                    if final or (valid and score is not None and score >= route["thresholds"][stage]):
                        quality += weight * row["correct"]
                        accepted_invalid += weight * (not valid and not final)
                        returned_invalid += weight * (not valid and final)
                        escalated += weight * (stage > 0)
                        break
        n = len(by_query)
        routes = "; ".join(
            f"{route['weight']:g} x "
            + " -> ".join(route["models"])
            + "".join(f" @ {t:.4g}" for t in route["thresholds"])
            for route in tier["routes"]
        )
        lines.append(
            f"| {name} | {routes} | {quality / n:.3f} | ${cost / n:.3g} | {escalated / n:.1%} "
            f"| {accepted_invalid:g} | {returned_invalid:g} |"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--top-k", type=int, default=15)
    parser.add_argument("--policy", type=Path, help="also replay this policy's tiers on the runs")
    args = parser.parse_args(argv)
    rows = read_rows(args.runs)
    print("\n".join(category_table(rows)))
    print()
    print("\n".join(scorer_table(rows, args.top_k)))
    if args.policy:
        print()
        print("\n".join(tier_table(rows, args.policy)))


if __name__ == "__main__":
    main()
