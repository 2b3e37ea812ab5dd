"""Label-free calibration on a task with ground truth: judge labels against true labels, held out.

For each of ``--splits`` random halvings of the queries, calibrates one policy on the calibration
half's TRUE labels and one per judge on the same half's JUDGE labels (agreement with the
reference model's answer), then scores every policy on the held-out half with the TRUE labels
(``calibration/recalibration/label_free.py``). Prints, per judge and tier, the mean over splits (and
5th-95th percentile band) of held-out true quality and cost of both policies and the quality loss.

Run from the repository root (results in docs/learning.md):

    .venv/bin/python bench/learning/label_free.py data/local/mmlu-local-runs.jsonl.gz \\
        --tiers data/local/tiers.yaml --judge choice --judge exact --judge similarity

The ``llm`` judge asks a served model (``--llm-url``, ``--llm-model``; the reference model in
docs/learning.md) whether each answer agrees with the reference's, with the question from
``--questions`` when the runs table has no ``prompt`` column.

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
JUDGES = ("exact", "numeric", "choice", "similarity", "llm")


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
    parser.add_argument("--llm-url", help="llm judge: OpenAI-compatible base URL (http://HOST:PORT/v1)")
    parser.add_argument("--llm-model", default="judge", help="llm judge: the model name sent")
    parser.add_argument(
        "--llm-price",
        nargs=2,
        type=float,
        default=(0.0, 0.0),
        metavar=("IN", "OUT"),
        help="llm judge: USD per million prompt / generated tokens, to report what judging cost",
    )
    parser.add_argument("--concurrency", type=int, default=4, help="llm judge: queries judged at once")
    parser.add_argument(
        "--questions",
        type=Path,
        action="append",
        default=[],
        help="JSONL with query_id and prompt (repeatable): the question text for the llm judge",
    )
    parser.add_argument("--target", type=float, default=0.03, help="largest acceptable mean quality loss")
    parser.add_argument("--json", type=Path, default=None, help="write the summary here")
    args = parser.parse_args()

    from rich.console import Console

    from calibration.recalibration.label_free import StudyError, judge_labels, run_study, study_document
    from calibration.runs import load_runs
    from calibration.runs_columns import RunsError
    from calibration.tiers import TiersError, load_tiers

    console = Console(width=180)  # wide tables: the results are pasted into docs
    started = time.perf_counter()
    try:
        spec = load_tiers(args.tiers)
        matrix = load_runs(args.runs, prices=args.prices, scorer=args.scorer, top_k=args.top_k)
        reference = args.reference or matrix.models[-1]
        questions = read_questions(args.questions)
        labels = []
        for judge in args.judge:
            config: dict[str, object] = {"kind": judge}
            if judge == "similarity":
                config["threshold"] = args.similarity_threshold
            if judge == "llm":
                if not args.llm_url:
                    sys.exit("error: the llm judge needs --llm-url")
                config.update(
                    base_url=args.llm_url,
                    model=args.llm_model,
                    price={"input_per_mtok": args.llm_price[0], "output_per_mtok": args.llm_price[1]},
                    timeout_s=120.0,
                )
            began = time.perf_counter()
            with console.status(
                f"Labelling the answers with the {judge} judge against {reference} ..."
            ) as status:

                def progress(
                    done: int, total: int, judge: str = judge, status: Any = status, began: float = began
                ) -> None:
                    left = (time.perf_counter() - began) / done * (total - done)
                    status.update(
                        f"Labelling with the {judge} judge: {done}/{total} queries, ~{left:.0f} s left"
                    )

                labels.append(
                    judge_labels(
                        args.runs,
                        matrix,
                        config,
                        reference,
                        questions=questions,
                        concurrency=args.concurrency if judge == "llm" else 1,
                        on_query=progress,
                    )
                )
            cost = labels[-1].judge_cost_usd
            console.print(
                f"{judge}: labelled in {time.perf_counter() - began:.1f} s"
                + (f", judging cost ${cost:.3g}" if cost else "")
            )
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


def read_questions(paths: list[Path]) -> dict[str, str]:
    """query_id -> prompt from question files (collection/data/*.jsonl)."""
    questions: dict[str, str] = {}
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                questions[str(record["query_id"])] = str(record["prompt"])
    return questions


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
