"""The GSM8K sample: its rows are well formed prompt rows, and the sampler reads GSM8K's answers."""

from __future__ import annotations

import json

import pytest

from collection.gsm8k import final_number, sample_rows
from tests.support.data_files import REPO_ROOT as REPO

SAMPLE = REPO / "collection" / "data" / "gsm8k-train.jsonl"


def test_the_committed_sample_is_300_graded_train_questions() -> None:
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    assert len(rows) == 300 and len({r["query_id"] for r in rows}) == 300
    indices = [int(r["query_id"].removeprefix("gsm8k-train-")) for r in rows]
    assert indices == sorted(indices) and max(indices) < 7473
    assert all(r["answer"].lstrip("-").isdigit() and r["grader"] == "final_numeric" for r in rows)
    assert {r["dataset"] for r in rows} == {"gsm8k"}
    assert (REPO / "collection" / "data" / "LICENSE-GSM8K").read_text().startswith("MIT License")


def test_the_answer_is_the_number_after_the_marker() -> None:
    assert final_number("She pays 3 x 400 = 1,200.\n#### 1,200") == "1200"
    with pytest.raises(ValueError, match="####"):
        final_number("no marker")


def test_the_draw_is_seeded_and_kept_in_file_order() -> None:
    lines = [json.dumps({"question": f"q{i}?", "answer": f"step\n#### {i}"}) for i in range(50)]
    first, again = sample_rows(lines, 10, seed=3), sample_rows(lines, 10, seed=3)
    assert first == again and [r["query_id"] for r in first] == sorted(r["query_id"] for r in first)
    assert all(r["answer"] == str(int(r["query_id"][-4:])) for r in first)
