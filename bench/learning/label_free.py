"""Label-free calibration on a task with ground truth: judge labels against true labels, held out.

For each of ``--splits`` random halvings of the queries, calibrates one policy on the calibration
half's TRUE labels and one per judge on the same half's JUDGE labels (agreement with the
reference model's answer), then scores every policy on the held-out half with the TRUE labels
(``calibration/learning/label_free.py``). Prints, per judge and tier, the mean over splits (and
5th-95th percentile band) of held-out true quality and cost of both policies and the quality loss.

Run from the repository root (results in docs/learning.md):

    .venv/bin/python bench/learning/label_free.py data/local/mmlu-local-runs.jsonl.gz \\
        --tiers data/local/tiers.yaml --judge choice --judge exact --judge similarity

The runs table is a JSONL ``cascade collect`` output: ``correct`` the ground truth, ``response``
each model's answer, ``logprobs`` for the scorer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
JUDGES = ("exact", "numeric", "choice", "similarity")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", type=Path, help="JSONL runs table with ground-truth 'correct' and 'response'")
    parser.add_argument("--tiers", type=Path, required=True)
    parser.add_argument("--judge", action="append", choices=JUDGES, required=True, help="repeatable")
    parser.add_argument("--reference", help="the model whose answer defines right (default: the costliest)")
    parser.add_argument("--splits", type=int, default=50)
    parser.add_argument("--holdout", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scorer", default=None)
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--prices", type=Path, default=None)
    parser.add_argument("--randomize", action="store_true")
    parser.add_argument("--similarity-threshold", type=float, default=0.8)
    parser.add_argument("--target", type=float, default=0.03, help="largest acceptable mean quality loss")
    parser.add_argument("--json", type=Path, default=None, help="write the summary here")
    args = parser.parse_args()

    from rich.console import Console

    from calibration.learning.label_free import StudyError, judge_labels, run_study, study_document
    from calibration.runs import RunsError, load_runs
    from calibration.tiers import TiersError, load_tiers

    console = Console(width=180)  # wide tables: the results are pasted into docs
    started = time.perf_counter()
    try:
        spec = load_tiers(args.tiers)
        matrix = load_runs(args.runs, prices=args.prices, scorer=args.scorer, top_k=args.top_k)
        reference = args.reference or matrix.models[-1]
        labels = []
        for judge in args.judge:
            config: dict[str, object] = {"kind": judge}
            if judge == "similarity":
                config["threshold"] = args.similarity_threshold
            with console.status(f"Labelling the answers with the {judge} judge against {reference} ..."):
                began = time.perf_counter()
                labels.append(judge_labels(args.runs, matrix, config, reference))
            console.print(f"{judge}: labelled in {time.perf_counter() - began:.1f} s")
        with console.status(f"Calibrating and scoring {args.splits} splits ..."):
            studies = run_study(
                matrix,
                labels,
                spec,
                splits=args.splits,
                holdout=args.holdout,
                seed=args.seed,
                randomize=args.randomize,
            )
    except (RunsError, TiersError, StudyError) as exc:
        sys.exit(f"error: {exc}")
    settings = {
        "runs": os.path.relpath(args.runs),
        "tiers": os.path.relpath(args.tiers),
        "reference": reference,
        "splits": args.splits,
        "holdout": args.holdout,
        "seed": args.seed,
        "scorer": matrix.scorer,
        "top_k": matrix.top_k,
        "randomize": args.randomize,
        "command": " ".join(["bench/learning/label_free.py", *sys.argv[1:]]),
    }
    document = study_document(studies, spec, matrix, settings, args.target)
    print_summary(console, document)
    console.print(f"{time.perf_counter() - started:.1f} s in all")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2) + "\n")
        console.print(f"wrote {args.json}")


def band(stats: dict, kind: str) -> str:
    """'mean [p5, p95]' as quality (``q``), signed quality (``dq``) or USD (``usd``)."""
    if stats["mean"] is None:
        return "—"
    formats = {"q": "{:.4f}", "dq": "{:+.4f}", "usd": "${:.3g}"}
    fmt = formats[kind].format
    return f"{fmt(stats['mean'])} [{fmt(stats['p5'])}, {fmt(stats['p95'])}]"


def print_summary(console: Any, document: dict) -> None:
    """Per judge, each tier's true-label and judge-label policies: held-out true quality and cost."""
    from rich.table import Table

    models = ", ".join(f"{m} {v['true_quality']:.3f}" for m, v in document["models"].items())
    console.print(f"{document['queries']} queries; true quality: {models}")
    for judge in document["judges"]:
        agreement = ", ".join(f"{m} {v:.3f}" for m, v in judge["label_agreement_with_truth"].items())
        dropped = judge["calibration_queries_dropped_per_split"]
        title = (
            f"judge {judge['judge']} (reference {judge['reference']}); "
            f"judge label = true label: {agreement}; "
            f"{dropped:.1f} calibration queries per split lack a label"
        )
        table = Table(title=title, title_justify="left")
        for column in (
            "tier",
            "objective",
            "A: true labels",
            "A cost",
            "B: judge labels",
            "B cost",
            "loss A - B",
        ):
            table.add_column(column)
        table.add_column(f"mean loss <= {document['target_max_loss']:g}")
        table.add_column(f"splits losing > {document['target_max_loss']:g}")
        for name, tier in judge["tiers"].items():
            objective = ", ".join(f"{k} {v:g}" for k, v in tier["objective"].items())
            table.add_row(
                name,
                objective,
                band(tier["true_labels"]["quality"], "q"),
                band(tier["true_labels"]["cost_usd"], "usd"),
                band(tier["judge_labels"]["quality"], "q"),
                band(tier["judge_labels"]["cost_usd"], "usd"),
                band(tier["quality_loss"], "dq"),
                {True: "yes", False: "NO", None: "—"}[tier["within_target"]],
                "—"
                if tier["splits_losing_more_than_target"] is None
                else f"{tier['splits_losing_more_than_target']:.0%}",
            )
        console.print(table)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
