"""``cascade replay`` of tool-call questions: tools reach the models, answers are graded on their calls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from cascade_cli.main import app
from tests.support.factorial_tool import (
    FACTORIAL_ANSWER,
    FACTORIAL_QUESTION,
    FACTORIAL_TOOL,
    IRRELEVANT_QUESTION,
)
from tests.support.scripted_upstream import ok


def write_tool_prompts(path: Path) -> Path:
    """f0: factorial of 5 (one accepted call); f1: an irrelevant question (no call is right)."""
    rows = [
        {
            "query_id": "f0",
            "messages": [{"role": "user", "content": FACTORIAL_QUESTION}],
            "tools": [FACTORIAL_TOOL],
            "tool_choice": "auto",
            "answer": FACTORIAL_ANSWER,
            "grader": "tool_call",
        },
        {
            "query_id": "f1",
            "messages": [{"role": "user", "content": IRRELEVANT_QUESTION}],
            "tools": [FACTORIAL_TOOL],
            "tool_choice": "auto",
            "answer": "[]",
            "grader": "tool_call",
        },
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["replay", *args])


def test_tools_are_sent_and_calls_graded_native_or_written_as_content(
    tmp_path, upstream, policy_file, start_replay_gateway
):
    policy = policy_file(balanced={"routes": [{"weight": 1.0, "models": ["small"], "thresholds": []}]})
    gateway = start_replay_gateway(policy)
    native = [
        {"id": "c1", "type": "function", "function": {"name": "math_factorial", "arguments": '{"number": 5}'}}
    ]
    # balanced answers with the small model alone: f0 with a native call, f1 with a call (wrong).
    upstream.script(
        "up-small",
        ok(None, tool_calls=native),
        ok('```json\n{"name": "math_factorial", "arguments": {"number": "x"}}\n```', confidence=0.99),
    )
    out = tmp_path / "r.json"
    prompts = write_tool_prompts(tmp_path / "tools.jsonl")
    result = invoke(str(prompts), "-g", gateway.url, "-t", "balanced", "-o", str(out), "--concurrency", "1")
    assert result.exit_code in (0, 3), result.output

    sent = upstream.calls("up-small")
    assert sent and all(
        call.body["tools"] == [FACTORIAL_TOOL] and call.body["tool_choice"] == "auto" for call in sent
    )
    rows = {
        r["query_id"]: r for r in map(json.loads, (tmp_path / "r.requests.jsonl").read_text().splitlines())
    }
    assert rows["f0"]["kind"] == "tool_call" and rows["f0"]["correct"] == 1.0 and rows["f0"]["valid"] is True
    assert rows["f0"]["tool_calls"] == [{"name": "math_factorial", "arguments": '{"number": 5}'}]
    assert rows["f1"]["correct"] == 0.0  # any call to an irrelevant question is wrong
    assert rows["f1"]["valid"] is False and "violate its schema" in rows["f1"]["problem"]
    report = json.loads(out.read_text())
    assert report["arms"][0]["invalid_answers"] == 1
