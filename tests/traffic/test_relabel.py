"""Relabelling a runs table's recorded answers by a judge (``cascade traffic label``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from traffic.judges.text import ChoiceJudge
from traffic.relabel import RelabelError, read_queries, relabel


def write_runs(path: Path, records: list[dict]) -> Path:
    with gzip.open(path, "wt") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    return path


def record(query_id: str, model: str, response: str | None, correct: float = 1.0) -> dict:
    return {
        "query_id": query_id,
        "model": model,
        "correct": correct,
        "cost_usd": 0.001,
        "prompt_tokens": 9,
        "completion_tokens": 1,
        "response": response,
        "dataset": "mmlu",
    }


async def test_labels_replace_ground_truth_and_gaps_stay_missing(tmp_path: Path) -> None:
    runs = write_runs(
        tmp_path / "runs.jsonl.gz",
        [
            record("q1", "small", "B", correct=0.0),  # wrong by the truth, agrees with the reference
            record("q1", "large", "B", correct=0.0),
            record("q2", "small", None),  # no answer recorded: missing label, not 0
            record("q2", "large", "C"),
            record("q3", "small", "A"),  # the reference did not answer: nothing to agree with
            record("q3", "large", None),
        ],
    )
    rows = list(await relabel(read_queries(runs), ChoiceJudge(), "large"))
    labels = {(r.query_id, r.model): (r.correct, r.judge) for r in rows}
    assert labels == {
        ("q1", "small"): (1.0, "choice"),
        ("q1", "large"): (1.0, "reference"),
        ("q2", "small"): (None, None),
        ("q2", "large"): (1.0, "reference"),
    }
    assert all(r.response is None and r.prompt is None for r in rows)  # text only with log_text


def test_a_row_without_model_is_a_one_line_error(tmp_path: Path) -> None:
    runs = write_runs(tmp_path / "runs.jsonl.gz", [{"query_id": "q1"}])
    with pytest.raises(RelabelError, match=r"runs.jsonl.gz: line 1: not a runs row"):
        read_queries(runs)
