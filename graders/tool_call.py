"""The ``tool_call`` grader: the calls an answer makes against accepted calls, BFCL-style.

``response`` is the answer's calls as JSON: a list of ``{"name": ..., "arguments": ...}`` (the
runs table's ``tool_calls`` column; ``arguments`` a JSON text or an object). Any other text is an
answer without calls. ``answer`` is the accepted calls as JSON, in the Berkeley Function Calling
Leaderboard's form: a list with one entry per expected call, ``{function name: {parameter:
[accepted values]}}``. An empty list means no call is right (BFCL's irrelevance category): any
call is wrong, an answer without calls is right.

Otherwise the answer is right (1.0) when its calls can be paired one to one with the expected
calls, in any order (parallel calls), so that in each pair:

* the function names are equal;
* the arguments are a JSON object, every argument is a parameter of the expected call and its
  value is among the accepted values;
* every expected parameter the call leaves out has ``""`` among its accepted values (optional).

Values are compared as BFCL compares them: ``True`` is no number; integers equal floats; strings
equal after lower-casing, ``'`` read as ``"``, and spaces and ``,./-_*^`` removed; lists element by
element, in order; an object against an accepted object whose entries are lists of accepted
values by the rule above (unknown keys wrong, missing keys only when ``""`` is accepted).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
from typing import Any

_IGNORED = re.compile(r"[ ,./\-_*^]")
# An absent optional parameter is written as this accepted value.
ABSENT = ""


class ToolCallLabelError(ValueError):
    """The accepted calls are not JSON in BFCL's form."""


def parse_calls(response: str) -> list[tuple[str, Any]]:
    """(name, arguments) of each call in ``response``; [] when it is not a JSON list of calls.

    Arguments are parsed from their JSON text; arguments that do not parse are kept as the text
    (no accepted call matches them).
    """
    try:
        value = json.loads(response)
    except (json.JSONDecodeError, TypeError):
        return []
    if not isinstance(value, list):
        return []
    calls: list[tuple[str, Any]] = []
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return []
        arguments = item.get("arguments", {})
        if isinstance(arguments, str):
            with contextlib.suppress(json.JSONDecodeError):  # kept as text: matches nothing
                arguments = json.loads(arguments) if arguments.strip() else {}
        calls.append((item["name"], arguments))
    return calls


def parse_accepted(answer: str) -> list[tuple[str, dict[str, list[Any]]]]:
    """(function name, parameter -> accepted values) of each expected call."""
    try:
        value = json.loads(answer)
    except json.JSONDecodeError as exc:
        raise ToolCallLabelError(f"accepted calls are not JSON ({exc.msg})") from exc
    if not isinstance(value, list):
        raise ToolCallLabelError("accepted calls must be a JSON list")
    accepted: list[tuple[str, dict[str, list[Any]]]] = []
    for entry in value:
        if not isinstance(entry, dict) or len(entry) != 1:
            raise ToolCallLabelError(f"an accepted call must be {{name: {{param: [values]}}}}: {entry!r}")
        ((name, params),) = entry.items()
        if not isinstance(params, dict) or not all(isinstance(v, list) for v in params.values()):
            raise ToolCallLabelError(f"accepted values of {name!r} must be lists")
        accepted.append((name, params))
    return accepted


def standardize(text: str) -> str:
    """A string as BFCL compares it: lower case, ``'`` as ``"``, no spaces nor ``,./-_*^``."""
    return _IGNORED.sub("", text).lower().replace("'", '"')


def value_matches(value: Any, accepted: Any) -> bool:
    """Whether a call's value equals one accepted value (see the module docstring)."""
    if isinstance(accepted, bool) or isinstance(value, bool):
        return isinstance(accepted, bool) and isinstance(value, bool) and value == accepted
    if isinstance(accepted, int | float):
        return isinstance(value, int | float) and float(value) == float(accepted)
    if isinstance(accepted, str):
        return isinstance(value, str) and standardize(value) == standardize(accepted)
    if isinstance(accepted, list):
        return (
            isinstance(value, list)
            and len(value) == len(accepted)
            and all(value_matches(v, a) for v, a in zip(value, accepted, strict=True))
        )
    if isinstance(accepted, dict):
        if not isinstance(value, dict):
            return False
        if all(isinstance(v, list) for v in accepted.values()):
            return arguments_match(value, accepted)
        return value.keys() == accepted.keys() and all(value_matches(value[k], accepted[k]) for k in value)
    return bool(value == accepted)


def arguments_match(arguments: Any, accepted: dict[str, list[Any]]) -> bool:
    """Every argument accepted and every left-out parameter optional."""
    if not isinstance(arguments, dict):
        return False
    for name, value in arguments.items():
        if name not in accepted or not any(value_matches(value, a) for a in accepted[name]):
            return False
    return all(ABSENT in values for name, values in accepted.items() if name not in arguments)


def call_matches(call: tuple[str, Any], expected: tuple[str, dict[str, list[Any]]]) -> bool:
    """The call has the expected function's name and accepted arguments."""
    return call[0] == expected[0] and arguments_match(call[1], expected[1])


def _paired(calls: list[tuple[str, Any]], expected: list[tuple[str, dict[str, list[Any]]]]) -> bool:
    """Whether the calls pair one to one with the expected calls (any order; backtracking)."""
    if not expected:
        return not calls
    first, rest = expected[0], expected[1:]
    return any(
        call_matches(call, first) and _paired(calls[:i] + calls[i + 1 :], rest)
        for i, call in enumerate(calls)
    )


def grade_tool_call(response: str, answer: str, aliases: Sequence[str] = ()) -> float:
    """1.0 if the calls in ``response`` are the accepted calls of ``answer``, else 0.0."""
    expected = parse_accepted(answer)
    calls = parse_calls(response)
    if len(calls) != len(expected):
        return 0.0
    return 1.0 if _paired(calls, expected) else 0.0
