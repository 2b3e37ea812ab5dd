"""A client's schema is bounded before it runs (policies/schema_limits.py, policies/schema_work.py):
each stated limit refuses, only the drafts the gateway runs are run, every answer check is counted
against a budget of steps, and enum and uniqueItems compare by hashing with JSON Schema's equality."""

from __future__ import annotations

from typing import Any

import pytest

from policies.answer_checks import TOO_MUCH_WORK, check_answer, schema_violation
from policies.client_schemas import schema_problem
from policies.schema_limits import MAX_BRANCHES, MAX_DEFS, MAX_ENUM_VALUES, MAX_SCHEMA_NODES, SchemaAllowance
from policies.schema_work import MAX_CHECK_STEPS, WorkBudget
from tests.support.hostile_schemas import OVER_LIMITS, array_of, branches, defs, doubling, subschemas


@pytest.mark.parametrize("limit", sorted(OVER_LIMITS))
def test_a_schema_over_each_limit_is_refused_and_never_checked(limit: str) -> None:
    schema, words = OVER_LIMITS[limit]
    assert words in (schema_problem(schema) or "")
    assert schema_violation(schema, {"items": [1]}) is None  # not run: accepted as the client's


def test_the_limits_are_shared_by_a_request_s_schemas() -> None:
    allowance = SchemaAllowance()
    half = defs(MAX_DEFS // 2 + 1)
    assert schema_problem(half, allowance) is None
    assert f"{MAX_DEFS} $defs" in (schema_problem(half, allowance) or "")


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        (
            {"$schema": "http://json-schema.org/draft-03/schema#", "extends": {"$ref": "http://x/s"}},
            "not a draft",
        ),
        ({"extends": {"$ref": "http://127.0.0.1:9/s.json"}}, "refers outside"),
        (
            {"$schema": "http://json-schema.org/draft-04/schema#", "type": [{"$ref": "http://x/s"}]},
            "refers outside",
        ),
        ({"contentSchema": {"$ref": "https://x/s"}}, "refers outside"),
        (
            {"properties": {"a": {"$schema": "http://json-schema.org/draft-07/schema#"}}},
            "only at a schema's root",
        ),
        ({"$schema": 7}, "not a draft"),
        ({"$dynamicRef": "#meta"}, "$dynamicRef is not supported"),
        ({"$recursiveRef": "#"}, "$recursiveRef is not supported"),
    ],
)
def test_a_schema_the_gateway_does_not_run_is_refused(schema: dict[str, Any], words: str) -> None:
    assert words in (schema_problem(schema) or "")
    assert schema_violation(schema, {"a": 1}) is None


@pytest.mark.parametrize(
    "draft",
    [
        "http://json-schema.org/draft-04/schema#",
        "http://json-schema.org/draft-07/schema",
        "https://json-schema.org/draft/2019-09/schema",
        "https://json-schema.org/draft/2020-12/schema",
    ],
)
def test_a_declared_draft_runs_on_the_linear_engine_even_through_a_ref_to_the_root(draft: str) -> None:
    # A ref back to a root that names its draft must not switch to jsonschema's own validator
    # (Python's backtracking re, no counting).
    schema = {"$schema": draft, "type": ["string", "array"], "items": {"$ref": "#"}, "pattern": "^(a+)+$"}
    assert schema_problem(schema) is None
    assert "does not match" in (schema_violation(schema, [["a" * 60 + "!"]]) or "")


@pytest.mark.parametrize(
    "schema",
    [{"required": "a"}, {"items": [{"type": "string"}]}, {"minLength": -1}, {"type": "text"}, {"anyOf": []}],
)
def test_a_schema_with_a_malformed_keyword_is_not_checked(schema: dict[str, Any]) -> None:
    assert schema_problem(schema) is None  # the client's mistake: not refused, not held against the answer
    assert schema_violation(schema, {"a": 1}) is None


def test_enum_and_unique_items_keep_json_schema_equality() -> None:
    enum = {"enum": [1, "a", {"x": [1, 2]}, None]}
    for value in (1, 1.0, "a", {"x": [1.0, 2]}, None):
        assert schema_violation(enum, value) is None
    for value in (True, False, "1", {"x": [2, 1]}, [1]):
        assert "is not one of" in (schema_violation(enum, value) or "")
    unique = {"type": "array", "uniqueItems": True}
    assert schema_violation(unique, [1, True, "1", [1], {"a": 1, "b": 2}, {"a": 2}]) is None
    assert "repeats an earlier item" in (
        schema_violation(unique, [{"a": 1, "b": 2}, {"b": 2, "a": 1.0}]) or ""
    )


def test_the_largest_accepted_schemas_check_big_answers_within_the_budget() -> None:
    enum = [f"value-{i}" for i in range(MAX_ENUM_VALUES)]
    listed = array_of({"enum": enum}, uniqueItems=True)
    assert schema_problem(listed) is None
    assert schema_violation(listed, {"items": enum[-400:]}) is None
    assert "is not one of" in (schema_violation(listed, {"items": [*enum[-400:], "other"]}) or "")
    assert "repeats" in (schema_violation(listed, {"items": [enum[0], enum[0]]}) or "")
    widest = array_of(branches(MAX_BRANCHES))
    assert schema_problem(widest) is None
    assert schema_violation(widest, {"items": [{"kind": f"k{MAX_BRANCHES - 1}"}] * 2}) is None
    assert "is not valid under any" in (schema_violation(widest, {"items": [{"kind": "none"}]}) or "")
    deepest = doubling(8)  # 1,022 paths at the items
    assert schema_problem(deepest) is None
    assert schema_violation(deepest, {"items": ["a"] * 5}) is None
    largest = subschemas(MAX_SCHEMA_NODES)
    assert schema_problem(largest) is None
    assert schema_violation(largest, {f"p{i}": "v" for i in range(1_000)}) is None
    assert "is not of type 'string'" in (schema_violation(largest, {"p1": 1}) or "")


def test_an_answer_past_the_budget_is_not_shown_to_satisfy_its_schema() -> None:
    widest = array_of(branches(MAX_BRANCHES))
    budget = WorkBudget()
    assert (
        schema_violation(widest, {"items": [{"kind": f"k{MAX_BRANCHES - 1}"}] * 2_000}, budget)
        == TOO_MUCH_WORK
    )
    assert budget.left < 0
    unique = {"type": "array", "uniqueItems": True}
    assert schema_violation(unique, [{"id": i} for i in range(MAX_CHECK_STEPS)]) == TOO_MUCH_WORK
    request = {"response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": widest}}}
    answer = '{"items": [' + ", ".join([f'{{"kind": "k{MAX_BRANCHES - 1}"}}'] * 2_000) + "]}"
    problem = check_answer(request, {"content": answer})
    assert problem is not None and problem.kind == "invalid_structured_output"
    assert "not checked" in problem.detail


def test_an_answer_s_calls_share_one_budget() -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": array_of(branches(MAX_BRANCHES))}}
    arguments = '{"items": [' + ", ".join([f'{{"kind": "k{MAX_BRANCHES - 1}"}}'] * 2) + "]}"
    one = {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
    assert check_answer({"tools": [tool]}, {"content": None, "tool_calls": [one]}) is None
    problem = check_answer({"tools": [tool]}, {"content": None, "tool_calls": [one] * 10})
    assert problem is not None and problem.kind == "invalid_tool_call" and "not checked" in problem.detail
