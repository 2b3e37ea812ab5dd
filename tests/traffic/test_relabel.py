"""Relabelling a runs table's recorded answers by a judge (``cascade traffic label``)."""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path

import pytest

from traffic.judges.base import Verdict
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


class QuestionRecordingJudge:
    """Agrees with everything, records the question it was shown, and finishes out of order."""

    name = "recording"

    def __init__(self) -> None:
        self.questions: list[str] = []
        self.running = 0
        self.most_running = 0

    async def judge(self, question: str, reference: str, answer: str) -> Verdict:
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        await asyncio.sleep(0.01 if question.endswith("1?") else 0)  # the first query finishes last
        self.running -= 1
        self.questions.append(question)
        return Verdict(1.0, self.name)


async def test_concurrent_labelling_keeps_query_order_and_reads_questions_from_a_question_file(
    tmp_path: Path,
) -> None:
    runs = write_runs(
        tmp_path / "runs.jsonl.gz",
        [record(f"q{i}", m, "B") for i in range(1, 7) for m in ("small", "large")],
    )
    judge = QuestionRecordingJudge()
    progress: list[tuple[int, int]] = []
    questions = {f"q{i}": f"What is {i}?" for i in range(1, 7)}
    rows = list(
        await relabel(
            read_queries(runs),
            judge,
            "large",
            questions=questions,
            concurrency=3,
            on_query=lambda done, total: progress.append((done, total)),
        )
    )
    assert [r.query_id for r in rows] == [f"q{i}" for i in range(1, 7) for _ in range(2)]
    assert sorted(judge.questions) == sorted(questions.values())
    assert judge.most_running == 3
    assert progress[-1] == (6, 6) and len(progress) == 6


async def test_labelled_rows_keep_the_runs_kind_and_an_unknown_kind_is_a_one_line_error(
    tmp_path: Path,
) -> None:
    tool = {"kind": "tool_call"}
    runs = write_runs(
        tmp_path / "runs.jsonl.gz",
        [
            {**record("q1", "small", "B"), **tool},
            {**record("q1", "large", "B"), **tool},
            record("q2", "small", "A"),  # no kind column: text
            record("q2", "large", "A"),
        ],
    )
    rows = list(await relabel(read_queries(runs), ChoiceJudge(), "large"))
    assert {(r.query_id, r.kind) for r in rows} == {("q1", "tool_call"), ("q2", "text")}
    bad = write_runs(tmp_path / "bad.jsonl.gz", [{**record("q1", "small", "B"), "kind": "tools"}])
    with pytest.raises(RelabelError, match=r"bad.jsonl.gz: line 1: column 'kind': unknown kind 'tools'"):
        read_queries(bad)
