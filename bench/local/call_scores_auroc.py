"""Does scoring only a call's decisions tell right calls from wrong ones better? (docs/tool-calls.md)

    .venv/bin/python bench/local/call_scores_auroc.py data/local/bfcl-runs.jsonl.gz [MORE.jsonl ...]
        [--top-k 15] [--resamples 2000] [--subjects simple_python,multiple,live_simple]
        [--pair qwen2.5-coder-0.5b,qwen2.5-coder-1.5b]

For each model of the runs rows (BFCL, ``collection.bfcl``) and each logprob scorer
(``policies.scorers``), the AUROC of the score for telling right answers (``correct`` >= 0.5) from
wrong ones, on the rows with ``valid`` true (an invalid call is escalated by the checks whatever its
score), with ``tokens = all`` (every generated token) and ``tokens = call_values`` (the function
name and argument values of a call; all tokens for an answer that is not a call,
``policies.call_tokens``). The difference comes with a 95% interval from a paired bootstrap over
the rows (seed 0). A second table restricts the rows to answers that are calls (the only rows where
the two differ), and with ``--subjects`` a third one to the rows of those subjects (BFCL categories
whose questions want exactly one call). With ``--pair CHEAP,STRONG``, a last table for a cascade of
the two: among the questions (of ``--subjects`` when given) whose cheap answer is valid and wrong,
the AUROC of a low cheap score for "the strong model is right" (escalating helps) against "the strong
model is wrong too". Prints Markdown.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from calibration.diagnostics import auroc
from policies.call_tokens import call_value_positions
from policies.scorers import SCORERS, score_logprobs

MODES = ("all", "call_values")


def read_rows(paths: list[Path]) -> list[dict[str, Any]]:
    """The runs rows of .jsonl / .jsonl.gz files, in order."""
    rows = []
    for path in paths:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as handle:
            rows += [json.loads(line) for line in handle if line.strip()]
    return rows


def scored(rows: list[dict[str, Any]], top_k: int) -> dict[str, dict[str, Any]]:
    """Per model: correctness (bool), whether the answer is a call, and each (scorer, mode)'s scores."""
    out: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"correct": [], "call": [], "subject": [], "scores": defaultdict(list)}
    )
    for row in rows:
        if row.get("valid") is False:
            continue
        content = row.get("logprobs")
        if isinstance(content, str):
            content = json.loads(content)
        model = out[row["model"]]
        model["correct"].append(float(row["correct"]) >= 0.5)
        model["call"].append(bool(call_value_positions(content or [])))
        model["subject"].append(str(row.get("subject", "")))
        for name in SCORERS:
            for mode in MODES:
                value = score_logprobs(content, name, top_k, mode)
                model["scores"][name, mode].append(np.nan if value is None else value)
    return out


def paired_difference(
    low: np.ndarray, high: np.ndarray, correct: np.ndarray, resamples: int
) -> tuple[float, float, float]:
    """AUROC(high) - AUROC(low) and its 2.5/97.5 percentiles over paired bootstrap resamples."""
    rng = np.random.default_rng(0)
    differences = []
    for _ in range(resamples):
        rows = rng.integers(0, correct.size, correct.size)
        difference = auroc(high[rows], correct[rows]) - auroc(low[rows], correct[rows])
        if np.isfinite(difference):
            differences.append(difference)
    low_q, high_q = np.percentile(differences, [2.5, 97.5])
    return auroc(high, correct) - auroc(low, correct), float(low_q), float(high_q)


def table(per_model: dict[str, dict[str, Any]], rows: str, resamples: int, subjects: set[str]) -> list[str]:
    """Markdown lines: one row per model and scorer, on the valid ``rows``: ``all``, ``calls`` (the
    answers that are calls) or ``subjects`` (the rows of those subjects)."""
    lines = [
        "| model | rows (right) | scorer | AUROC all | AUROC call_values | difference [95% interval] |",
        "|---|---|---|---|---|---|",
    ]
    for model, data in per_model.items():
        correct = np.array(data["correct"])
        keep = {
            "all": np.ones(correct.size, dtype=bool),
            "calls": np.array(data["call"]),
            "subjects": np.isin(np.array(data["subject"]), sorted(subjects)),
        }[rows]
        # A row a scorer cannot score (no usable position) ranks lowest, as an escalated answer.
        for name in SCORERS:
            all_tokens, values = (
                np.nan_to_num(np.array(data["scores"][name, m]), nan=-np.inf) for m in MODES
            )
            a, v, c = all_tokens[keep], values[keep], correct[keep]
            difference, low, high = paired_difference(a, v, c, resamples)
            lines.append(
                f"| {model} | {int(keep.sum())} ({int(c.sum())}) | `{name}` | {auroc(a, c):.3f} | "
                f"{auroc(v, c):.3f} | {difference:+.3f} [{low:+.3f}, {high:+.3f}] |"
            )
    return lines


def escalation_table(
    rows: list[dict[str, Any]], cheap: str, strong: str, subjects: set[str], top_k: int
) -> list[str]:
    """Markdown lines: per scorer, how well a low cheap score finds the wrong cheap answers that the
    strong model gets right, among the cheap model's valid wrong answers."""
    by_query: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in rows:
        if not subjects or row.get("subject") in subjects:
            by_query[row["query_id"]][row["model"]] = row
    wrong = [
        (answers[cheap], float(answers[strong]["correct"]) >= 0.5)
        for answers in by_query.values()
        if cheap in answers and strong in answers
        if answers[cheap].get("valid") is not False and float(answers[cheap]["correct"]) < 0.5
    ]
    helps = np.array([strong_right for _, strong_right in wrong])
    lines = [
        f"{len(wrong)} valid wrong {cheap} answers, {int(helps.sum())} of them right for {strong}:",
        "",
        "| scorer | AUROC all | AUROC call_values |",
        "|---|---|---|",
    ]
    for name in SCORERS:
        cells = []
        for mode in MODES:
            values = [score_logprobs(row.get("logprobs"), name, top_k, mode) for row, _ in wrong]
            score = np.array([-np.inf if v is None else v for v in values])
            cells.append(f"{auroc(-score, helps):.3f}")
        lines.append(f"| `{name}` | {' | '.join(cells)} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+")
    parser.add_argument("--top-k", type=int, default=15)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--subjects", default="", help="comma-separated subjects for a third table")
    parser.add_argument("--pair", default="", help="CHEAP,STRONG: the escalation table of that cascade")
    args = parser.parse_args()
    rows = read_rows(args.runs)
    per_model = scored(rows, args.top_k)
    subjects = {s for s in args.subjects.split(",") if s}
    print(f"Valid rows, top_k={args.top_k}, paired bootstrap of {args.resamples} resamples (seed 0):\n")
    print("\n".join(table(per_model, "all", args.resamples, subjects)))
    print("\nValid rows whose answer is a call:\n")
    print("\n".join(table(per_model, "calls", args.resamples, subjects)))
    if subjects:
        print(f"\nValid rows of the subjects {', '.join(sorted(subjects))}:\n")
        print("\n".join(table(per_model, "subjects", args.resamples, subjects)))
    if args.pair:
        cheap, strong = args.pair.split(",")
        where = f" (subjects {', '.join(sorted(subjects))})" if subjects else ""
        print(f"\nEscalation helps{where}: ", end="")
        print("\n".join(escalation_table(rows, cheap, strong, subjects, args.top_k)))


if __name__ == "__main__":
    main()
