"""What an answer is, beyond its text: its request's kind, its calls, its structural check, its grade.

Shared by ``cascade collect`` (the runs table's ``kind``, ``tool_calls``, ``valid`` and ``problem``
columns, docs/contracts.md#runs-table) and ``cascade replay``, so a recorded answer and a replayed
one are read, checked and graded the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from collection.prompts import Prompt
from graders import grade
from policies.answer_checks import check_answer, declared_functions
from policies.tool_calls import ToolCall, answer_calls, request_kind


def calls_json(calls: list[ToolCall]) -> list[dict[str, str]]:
    """Calls as the runs table stores them: ``[{"name", "arguments"}]`` (arguments as written)."""
    return [{"name": call.name, "arguments": call.arguments} for call in calls]


def answer_fields(request: Mapping[str, Any], message: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``kind``, ``valid``, ``problem`` (and, for calls, ``tool_calls``) of an answer.

    ``tool_calls`` is written for tool requests and for any answer that makes calls; calls written
    as JSON in the content count when the request declares functions (as ``check_answer`` reads
    them: otherwise call-shaped content is text).
    """
    kind = request_kind(request)
    calls = answer_calls(message, in_content=bool(declared_functions(request)))
    problem = check_answer(request, message)
    fields: dict[str, Any] = {
        "kind": kind,
        "valid": problem is None,
        "problem": None if problem is None else f"{problem.kind}: {problem.detail}",
    }
    if kind == "tool_call" or calls:
        fields["tool_calls"] = calls_json(calls)
    return fields


def graded_text(prompt: Prompt, message: Mapping[str, Any] | None) -> str:
    """What the prompt's grader reads: the calls as JSON for ``tool_call``, else the content."""
    if prompt.grader == "tool_call":
        calls = answer_calls(message, in_content=bool(declared_functions(prompt.request_fields())))
        return json.dumps(calls_json(calls), ensure_ascii=False)
    content = message.get("content") if isinstance(message, Mapping) else None
    return content if isinstance(content, str) else ""


def grade_message(prompt: Prompt, message: Mapping[str, Any] | None) -> float:
    """The prompt's grade of a chat answer message."""
    return grade(prompt.grader, graded_text(prompt, message), prompt.answer, prompt.aliases)
