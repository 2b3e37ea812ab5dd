"""Structural checks of an answer against its request: certain failures, found before any score.

``check_answer(request, message)`` returns the first problem of a chat answer, or None:

* ``invalid_tool_call``: a call to a function the request did not declare; arguments that are not
  a JSON object or that violate the function's ``parameters`` schema (required properties, types,
  enums: JSON Schema); a call although ``tool_choice`` is ``none``; no call although
  ``tool_choice`` is ``required`` or names a function (or a call to another function than that one).
* ``invalid_structured_output``: content that does not parse as JSON although ``response_format``
  asks for ``json_object`` or ``json_schema``, or that violates the ``json_schema``'s schema.

The gateway escalates a scored stage whose answer has a problem whatever its score (and counts a
final stage's); calibration gives such an answer no chance of being accepted. Calls written as
``content`` count as calls (``policies.tool_calls.answer_calls``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from referencing.exceptions import Unresolvable

from policies.client_schemas import UnrunnablePattern, cached_validator
from policies.schema_work import MAX_CHECK_STEPS, OverBudget, WorkBudget, run_counted
from policies.tool_calls import ToolCall, answer_calls

ProblemKind = Literal["invalid_tool_call", "invalid_structured_output"]
PROBLEM_KINDS: tuple[ProblemKind, ...] = ("invalid_tool_call", "invalid_structured_output")

_NOT_JSON = object()  # content that does not parse (JSON null does, and a schema may allow it)

# The check of an answer stopped by its budget: the answer is not shown to satisfy its schema.
TOO_MUCH_WORK = f"not checked: checking it against its schema takes more than {MAX_CHECK_STEPS} steps"

# Schema errors are reported by their first message only, cut to this length (it names a value).
_DETAIL_CHARS = 200


@dataclass(frozen=True, slots=True)
class AnswerProblem:
    """Why an answer is certainly wrong: which check failed and a one-line detail."""

    kind: ProblemKind
    detail: str


def check_answer(request: Mapping[str, Any], message: Mapping[str, Any] | None) -> AnswerProblem | None:
    """The first structural problem of the chat ``message`` answering ``request``, or None.

    Its schema checks share one budget of steps (``policies.schema_work.MAX_CHECK_STEPS``): an
    answer that would take more is a problem (not shown to satisfy its schema)."""
    functions = declared_functions(request)
    # Made only where a schema may be checked: a request without one does no such work.
    budget = WorkBudget() if functions or "response_format" in request else None
    # Content that merely looks like a call is text when the request declares no function (a JSON
    # answer to a json_schema asking for {"name": ..., "arguments": ...} is no call).
    calls = answer_calls(message, in_content=bool(functions))
    problem = _tool_choice_problem(request.get("tool_choice"), calls, bool(functions))
    if problem is not None:
        return problem
    for call in calls:
        problem = _call_problem(call, functions, budget)
        if problem is not None:
            return problem
    if not calls:
        return _structured_output_problem(request.get("response_format"), message, budget)
    return None


def declared_functions(request: Mapping[str, Any]) -> dict[str, Any]:
    """Declared function name -> its ``parameters`` schema (None when it declares none)."""
    functions: dict[str, Any] = {}
    for tool in request.get("tools") or ():
        if not isinstance(tool, Mapping) or tool.get("type", "function") != "function":
            continue
        function = tool.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            functions[function["name"]] = function.get("parameters")
    return functions


def _tool_choice_problem(choice: Any, calls: list[ToolCall], declared: bool) -> AnswerProblem | None:
    if choice == "none" and calls:
        return AnswerProblem("invalid_tool_call", "a tool call although tool_choice is none")
    if choice == "required" and declared and not calls:
        return AnswerProblem("invalid_tool_call", "no tool call although tool_choice is required")
    if isinstance(choice, Mapping):
        function = choice.get("function")
        named = function.get("name") if isinstance(function, Mapping) else None
        if isinstance(named, str):
            if not calls:
                return AnswerProblem("invalid_tool_call", f"no call although tool_choice names {named!r}")
            other = next((c.name for c in calls if c.name != named), None)
            if other is not None:
                return AnswerProblem(
                    "invalid_tool_call", f"a call to {other!r} although tool_choice names {named!r}"
                )
    return None


def _call_problem(
    call: ToolCall, functions: dict[str, Any], budget: WorkBudget | None
) -> AnswerProblem | None:
    if call.name not in functions:
        return AnswerProblem(
            "invalid_tool_call", f"a call to {call.name!r}, which the request does not declare"
        )
    try:
        arguments = call.parsed_arguments()
    except orjson.JSONDecodeError:
        return AnswerProblem("invalid_tool_call", f"the arguments of {call.name!r} are not JSON")
    if not isinstance(arguments, dict):
        return AnswerProblem("invalid_tool_call", f"the arguments of {call.name!r} are not a JSON object")
    violation = schema_violation(functions[call.name], arguments, budget)
    if violation == TOO_MUCH_WORK:
        return AnswerProblem("invalid_tool_call", f"the arguments of {call.name!r}: {violation}")
    if violation is not None:
        return AnswerProblem(
            "invalid_tool_call", f"the arguments of {call.name!r} violate its schema: {violation}"
        )
    return None


def _structured_output_problem(
    response_format: Any, message: Mapping[str, Any] | None, budget: WorkBudget | None
) -> AnswerProblem | None:
    if not isinstance(response_format, Mapping):
        return None
    kind = response_format.get("type")
    if kind not in ("json_object", "json_schema"):
        return None
    content = message.get("content") if isinstance(message, Mapping) else None
    try:
        value = orjson.loads(content) if isinstance(content, str) else _NOT_JSON
    except orjson.JSONDecodeError:
        value = _NOT_JSON
    if value is _NOT_JSON:
        return AnswerProblem("invalid_structured_output", "the content is not JSON")
    if kind == "json_object":
        if not isinstance(value, dict):
            return AnswerProblem("invalid_structured_output", "the content is not a JSON object")
        return None
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, Mapping) else None
    violation = schema_violation(schema, value, budget)
    if violation == TOO_MUCH_WORK:
        return AnswerProblem("invalid_structured_output", f"the content: {violation}")
    if violation is not None:
        return AnswerProblem("invalid_structured_output", f"the content violates the schema: {violation}")
    return None


def schema_violation(schema: Any, value: Any, budget: WorkBudget | None = None) -> str | None:
    """The first way ``value`` violates the JSON Schema ``schema`` (one line), or None;
    ``TOO_MUCH_WORK`` when checking it would take more than ``budget``'s steps (a fresh one: the
    whole ``MAX_CHECK_STEPS``).

    No schema, or one that is not valid JSON Schema itself or cannot be run safely
    (``policies.client_schemas``: refs outside it, patterns RE2 cannot run), accepts everything:
    the request's schema is the client's, and a gateway must not fail an answer for the client's
    own mistake. A value nested too deeply to check is a violation (the answer's, not the client's).
    """
    if not isinstance(schema, Mapping) or not schema:
        return None
    try:
        schema_json = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:  # nested past what can be written: not checked
        return None
    compiled = cached_validator(schema_json)
    if compiled is None:
        return None
    budget = budget or WorkBudget()
    budget.paths = compiled.paths
    try:
        error = run_counted(budget, lambda: next(iter(compiled.validator.iter_errors(value)), None))
    except RecursionError:
        return "the value nests too deeply to be checked"
    except OverBudget:
        return TOO_MUCH_WORK
    except (Unresolvable, UnrunnablePattern):
        return None  # a ref that leads nowhere here (never fetched): the schema cannot be checked
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path)
    text = f"{where}: {error.message}" if where else error.message
    return text[:_DETAIL_CHARS]
