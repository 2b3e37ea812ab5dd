"""Collecting tool-call questions: tools are sent, calls written as content are recorded, checked, graded."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from collection.collector import CollectOptions, collect
from collection.prompts import Prompt, load_prompts
from collection.runs_writer import RunsWriter
from collection.targets import Target
from money import Price
from tests.support.factorial_tool import (
    FACTORIAL_ANSWER,
    FACTORIAL_QUESTION,
    FACTORIAL_TOOL,
    IRRELEVANT_QUESTION,
)

TOOLS = (FACTORIAL_TOOL,)


def _tool_question(query_id: str, question: str, answer: str, subject: str, **fields: Any) -> Prompt:
    """A BFCL question of ``subject`` asked with the factorial tool, the model free to call it."""
    return Prompt(
        query_id=query_id,
        prompt="",
        answer=answer,
        grader="tool_call",
        dataset="bfcl",
        subject=subject,
        conversation=({"role": "user", "content": question},),
        tools=TOOLS,
        tool_choice="auto",
        **fields,
    )


FACTORIAL = _tool_question("fact", FACTORIAL_QUESTION, FACTORIAL_ANSWER, "simple_python", max_tokens=128)
IRRELEVANT = _tool_question("irr", IRRELEVANT_QUESTION, "[]", "irrelevance")
TARGET = Target(
    name="small",
    base_url="http://small.test/v1",
    model="up-small",
    price=Price(input_per_mtok=1.0, output_per_mtok=2.0),
)


def _message(content: str) -> dict:
    tokens = [{"token": content, "logprob": -0.2, "bytes": None, "top_logprobs": []}]
    return {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "tool_calls": None},
                "logprobs": {"content": tokens},
            }
        ],
        "usage": {"prompt_tokens": 300, "completion_tokens": 20},
    }


def _collect(
    tmp_path: Path, prompts: list[Prompt], answers: dict[str, str], name: str = "runs.jsonl"
) -> tuple[list[dict], list[dict]]:
    sent: list[dict] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        sent.append(body)
        return httpx.Response(200, json=_message(answers[body["messages"][-1]["content"]]))

    path = tmp_path / name
    with RunsWriter(path) as writer:
        asyncio.run(
            collect(
                prompts, [TARGET], writer, set(), CollectOptions(), transport=httpx.MockTransport(upstream)
            )
        )
    return sent, [json.loads(line) for line in path.read_text().splitlines()]


def test_tools_and_tool_choice_are_sent_with_the_question(tmp_path: Path) -> None:
    sent, _ = _collect(
        tmp_path,
        [FACTORIAL],
        {FACTORIAL_QUESTION: '{"name": "math_factorial", "arguments": {}}'},
    )
    assert sent[0]["tools"] == list(TOOLS)
    assert sent[0]["tool_choice"] == "auto"
    assert sent[0]["messages"] == [{"role": "user", "content": "Calculate the factorial of 5."}]
    assert sent[0]["max_tokens"] == 128
    assert sent[0]["logprobs"] is True


@pytest.mark.parametrize(
    ("content", "correct", "valid", "problem"),
    [
        ('```json\n{"name": "math_factorial", "arguments": {"number": 5}}\n```', 1.0, True, None),
        ('{"name": "math_factorial", "arguments": {"number": 6}}', 0.0, True, None),
        ('{"name": "math_factorial", "arguments": {"number": "five"}}', 0.0, False, "violate its schema"),
        ('{"name": "factorial", "arguments": {"number": 5}}', 0.0, False, "does not declare"),
        ("The factorial of 5 is 120.", 0.0, True, None),
    ],
)
def test_calls_written_as_content_are_recorded_checked_and_graded(
    tmp_path: Path, content: str, correct: float, valid: bool, problem: str | None
) -> None:
    _, rows = _collect(tmp_path, [FACTORIAL], {FACTORIAL_QUESTION: content})
    (row,) = rows
    assert row["kind"] == "tool_call"
    assert row["correct"] == correct
    assert row["valid"] is valid
    assert (row["problem"] is None) if problem is None else (problem in row["problem"])
    assert row["response"] == content
    assert row["logprobs"]  # the call's own tokens, scored like any content
    if "{" in content:
        (call,) = row["tool_calls"]
        assert call["name"] in ("math_factorial", "factorial")
        assert json.loads(call["arguments"])["number"] in (5, 6, "five")
    else:
        assert row["tool_calls"] == []


def test_irrelevance_rows_are_right_without_a_call_and_wrong_with_one(tmp_path: Path) -> None:
    _, rows = _collect(tmp_path, [IRRELEVANT], {IRRELEVANT_QUESTION: "Shakespeare."})
    assert rows[0]["correct"] == 1.0 and rows[0]["tool_calls"] == []
    _, rows = _collect(
        tmp_path,
        [IRRELEVANT],
        {IRRELEVANT_QUESTION: '{"name": "math_factorial", "arguments": {"number": 1}}'},
        "with-call.jsonl",
    )
    assert rows[0]["correct"] == 0.0 and rows[0]["valid"] is True


def test_a_text_question_records_its_kind_and_no_calls(tmp_path: Path) -> None:
    text = Prompt(query_id="t", prompt="2+2?", answer="4", grader="numeric")
    _, rows = _collect(tmp_path, [text], {"2+2?": "4"})
    assert rows[0]["kind"] == "text" and rows[0]["valid"] is True and "tool_calls" not in rows[0]
    assert rows[0]["correct"] == 1.0


def test_committed_bfcl_sets_load_with_tools_and_accepted_calls(repo_root: Path) -> None:
    for name in ("bfcl.jsonl", "bfcl-heldout.jsonl"):
        prompts = load_prompts(repo_root / "collection" / "data" / name)
        assert {p.subject for p in prompts} == {
            "simple_python",
            "multiple",
            "parallel",
            "irrelevance",
            "live_simple",
        }
        for prompt in prompts:
            assert prompt.grader == "tool_call" and prompt.tools and prompt.tool_choice == "auto"
            assert (json.loads(prompt.answer) == []) == (prompt.subject == "irrelevance")
