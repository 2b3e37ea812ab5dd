"""Client schemas are data (policies/client_schemas.py): refs stay inside the schema and fetch
nothing, ref loops are refused, patterns run in linear time, validators are kept by bytes."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from policies.answer_checks import schema_violation
from policies.client_schemas import ByteBoundedCache, cached_validator, schema_problem
from tests.support.listener import Listener


@pytest.fixture
def listener():
    running = Listener()
    yield running
    running.close()


@pytest.mark.parametrize(
    "ref",
    ["http://{addr}/schema.json", "https://{addr}/x#/a", "file:///etc/passwd", "other.json", "//{addr}/s"],
)
def test_a_ref_outside_the_schema_is_refused_and_never_fetched(listener, ref) -> None:
    target = ref.format(addr=f"127.0.0.1:{listener.port}")
    schema = {"type": "object", "properties": {"a": {"$ref": target}}}
    assert "refers outside the schema" in (schema_problem(schema) or "")
    # Checking an answer against it fetches nothing either: the schema is simply not checked.
    assert schema_violation(schema, {"a": 1}) is None
    assert listener.connections() == 0


def test_a_ref_hidden_behind_an_id_fetches_nothing(listener) -> None:
    # A local-looking ref under a nested $id resolves against that URL: the registry refuses it.
    base = f"http://127.0.0.1:{listener.port}/root.json"
    schema = {"properties": {"a": {"$id": base, "properties": {"b": {"$ref": "#/$defs/missing"}}}}}
    assert schema_violation(schema, {"a": {"b": 1}}) is None
    assert listener.connections() == 0


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#"},
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        {"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "properties": {"x": {"$ref": "#/$defs/a"}}},
        {"$defs": {"a": {"$anchor": "here", "anyOf": [{"$ref": "#here"}]}}, "$ref": "#here"},
    ],
)
def test_a_ref_loop_is_refused_and_checking_against_it_is_clean(schema: dict[str, Any]) -> None:
    assert "loops back" in (schema_problem(schema) or "")
    assert schema_violation(schema, {"x": 1}) is None  # never a RecursionError


def test_a_recursive_schema_that_descends_into_the_value_is_allowed() -> None:
    tree = {
        "type": "object",
        "properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#"}}},
    }
    assert schema_problem(tree) is None
    assert schema_violation(tree, {"value": 1, "children": [{"value": 2, "children": []}]}) is None
    assert "is not of type 'integer'" in (schema_violation(tree, {"children": [{"value": "x"}]}) or "")


def test_a_backtracking_pattern_runs_in_linear_time() -> None:
    schema = {"type": "string", "pattern": "^(a+)+$"}
    started = time.perf_counter()
    for n in (27, 1_000, 100_000):
        assert "does not match" in (schema_violation(schema, "a" * n + "!") or "")
    assert schema_violation(schema, "a" * 100_000) is None
    # Python's re takes seconds at 27 characters and doubles per character; RE2 is linear.
    assert time.perf_counter() - started < 2.0


def test_pattern_properties_and_additional_properties_keep_their_meaning() -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "patternProperties": {"^x-(a+)+$": {"type": "integer"}},
        "additionalProperties": False,
    }
    assert schema_violation(schema, {"name": "n", "x-aaa": 1}) is None
    assert "is not of type 'integer'" in (schema_violation(schema, {"x-aa": "one"}) or "")
    assert "Additional properties" in (schema_violation(schema, {"y": 1}) or "")
    started = time.perf_counter()
    assert "Additional properties" in (schema_violation(schema, {"x-" + "a" * 40 + "!": 1}) or "")
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize("pattern", ["(?=a)b", r"(a)\1", "(?<!x)y", "a{2000}"])
def test_a_pattern_the_linear_engine_cannot_run_is_refused(pattern: str) -> None:
    assert "cannot be run in linear time" in (schema_problem({"pattern": pattern}) or "")
    assert "cannot be run" in (schema_problem({"patternProperties": {pattern: {}}}) or "")


def test_pattern_properties_beside_unevaluated_properties_is_refused() -> None:
    schema = {"patternProperties": {"^a": {}}, "unevaluatedProperties": False}
    assert "unevaluatedProperties" in (schema_problem(schema) or "")


def test_a_property_named_like_a_keyword_is_no_keyword() -> None:
    schema = {"type": "object", "properties": {"pattern": {"type": "string"}, "$ref": {"type": "string"}}}
    assert schema_problem(schema) is None
    assert schema_violation(schema, {"pattern": "(?=x)", "$ref": "http://x"}) is None


def test_the_validator_cache_is_bounded_by_bytes() -> None:
    cache: ByteBoundedCache[str, int] = ByteBoundedCache(1_000)
    for i in range(50):
        cache.get_or_make(f"k{i}", 300, lambda: 1)
        assert cache.size <= 1_000
    assert len(cache) == 3
    cache.get_or_make("huge", 5_000, lambda: 2)  # larger than the budget: made, never kept
    assert len(cache) == 3 and cache.size == 900


def test_distinct_large_schemas_do_not_grow_the_validator_cache_past_its_budget(monkeypatch) -> None:
    from policies import client_schemas

    cache = client_schemas._validators
    monkeypatch.setattr(cache, "budget", 400_000)  # 2 of the schemas below, to keep the test short
    cache.clear()
    for i in range(5):
        props = {f"p{i}_{j}": {"type": "string", "description": "x" * 80} for j in range(1_500)}
        schema = {"type": "object", "properties": props}
        assert cached_validator(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)) is not None
        assert cache.size <= 400_000
    assert len(cache) == 2
    cache.clear()


def test_a_schema_nested_past_what_the_validator_walks_is_not_checked_never_an_error() -> None:
    schema: dict[str, Any] = {"type": "string"}
    value: Any = "x"
    for _ in range(120):  # 240 levels: a request body nests at most 254
        schema = {"type": "object", "properties": {"a": schema}}
        value = {"a": value}
    assert schema_problem(schema) is None
    assert schema_violation(schema, value) is None


def test_json_schema_unicode_escapes_run_on_the_linear_engine() -> None:
    schema = {"type": "string", "pattern": "^[\\u0041-\\u005a]+\\u00e9$"}
    assert schema_problem(schema) is None
    assert schema_violation(schema, "ABCé") is None
    assert "does not match" in (schema_violation(schema, "abcé") or "")
    literal = {"type": "string", "pattern": "^\\\\u0041$"}  # an escaped backslash, then "u0041"
    assert schema_violation(literal, "\\u0041") is None
