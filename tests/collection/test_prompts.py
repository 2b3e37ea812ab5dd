"""Prompt sets: the committed MMLU set loads; bad files fail with file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collection.prompts import PromptSetError, load_prompts


def test_committed_mmlu_set_is_valid_and_labelled(repo_root: Path) -> None:
    prompts = load_prompts(repo_root / "collection" / "data" / "mmlu-local.jsonl")
    assert len(prompts) == 400
    assert {p.answer for p in prompts} == set("ABCD")
    assert all(p.grader == "multiple_choice" and p.prompt.endswith("Answer:") for p in prompts)
    assert prompts[0].messages()[0]["role"] == "system"
    assert (repo_root / "collection" / "data" / "SOURCE.md").is_file()


def _write(tmp_path: Path, *rows: dict) -> Path:
    path = tmp_path / "set.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_missing_field_names_the_line(tmp_path: Path) -> None:
    good = {"query_id": "q1", "prompt": "p", "answer": "A", "grader": "multiple_choice"}
    path = _write(tmp_path, good, {"query_id": "q2", "prompt": "p", "grader": "multiple_choice"})
    with pytest.raises(PromptSetError, match=r"set\.jsonl:2: missing answer"):
        load_prompts(path)


def test_duplicate_query_id_and_unknown_grader_are_errors(tmp_path: Path) -> None:
    row = {"query_id": "q1", "prompt": "p", "answer": "A", "grader": "multiple_choice"}
    with pytest.raises(PromptSetError, match="duplicate query_id 'q1'"):
        load_prompts(_write(tmp_path, row, row))
    with pytest.raises(PromptSetError, match="unknown grader 'vibes'"):
        load_prompts(_write(tmp_path, {**row, "grader": "vibes"}))


def test_limit_keeps_the_first_questions(tmp_path: Path) -> None:
    rows = [{"query_id": f"q{i}", "prompt": "p", "answer": "1", "grader": "numeric"} for i in range(5)]
    assert [p.query_id for p in load_prompts(_write(tmp_path, *rows), limit=2)] == ["q0", "q1"]
