"""A sample of GSM8K's train split (Cobbe et al., 2021) as a prompt set: real grade-school word
problems beside the generated ones (``collection.word_problems``), for the shift the generated set
cannot show (docs/calibrate.md#the-benefit-scorer, docs/operations.md#shift-alarm).

``python -m collection.gsm8k TRAIN.jsonl OUT.jsonl [--n 300] [--seed 0]`` reads GSM8K's
``grade_school_math/data/train.jsonl`` (7,473 rows of ``question`` and ``answer``, the answer's
last line ``#### N``) and writes ``--n`` of them, drawn without replacement by
``random.Random(seed)`` and kept in file order, as prompt rows: ``query_id`` ``gsm8k-train-<line
index>``, the question as ``prompt``, the final number as ``answer`` (thousands separators
dropped), graded by ``final_numeric``. The train split only: its test split stays untouched for
checks. The same arguments give the same file, byte for byte.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path


def final_number(answer: str) -> str:
    """The number after GSM8K's ``####`` marker, without thousands separators."""
    marker = answer.rsplit("####", 1)
    if len(marker) != 2:
        raise ValueError(f"no '#### N' line in {answer[-60:]!r}")
    return marker[1].strip().replace(",", "")


def sample_rows(lines: list[str], n: int, seed: int) -> list[dict[str, str]]:
    """``n`` prompt rows drawn from GSM8K's JSONL ``lines`` (module docstring)."""
    chosen = sorted(random.Random(seed).sample(range(len(lines)), n))
    rows = []
    for index in chosen:
        item = json.loads(lines[index])
        rows.append(
            {
                "query_id": f"gsm8k-train-{index:04d}",
                "prompt": item["question"],
                "answer": final_number(item["answer"]),
                "grader": "final_numeric",
                "dataset": "gsm8k",
                "subject": "gsm8k_train",
            }
        )
    return rows


def main() -> None:
    """Write the sample (module docstring)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("train", type=Path, help="GSM8K's grade_school_math/data/train.jsonl")
    parser.add_argument("out", type=Path)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    lines = [line for line in args.train.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = sample_rows(lines, args.n, args.seed)
    args.out.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    print(f"wrote {len(rows)} questions to {args.out}")


if __name__ == "__main__":
    main()
