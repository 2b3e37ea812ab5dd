"""The tool_call grader against hand-written accepted and rejected calls (BFCL's answer form)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from graders import GraderError, grade

TRIANGLE = json.dumps([{"calculate_triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}}])
SPOTIFY = json.dumps(
    [
        {"spotify_play": {"artist": ["Taylor Swift"], "duration": [20]}},
        {"spotify_play": {"artist": ["Maroon 5"], "duration": [15]}},
    ]
)
NESTED = json.dumps(
    [
        {
            "db_fetch": {
                "conditions": [
                    {"department": ["Science"], "school": ["Bluebird High School", "Bluebird HS"]}
                ],
                "fields": [["name", "age"]],
                "limit": ["", 10],
            }
        }
    ]
)


def calls(*items: tuple[str, Any]) -> str:
    """Calls as the runs table stores them: arguments as JSON text."""
    return json.dumps(
        [{"name": name, "arguments": a if isinstance(a, str) else json.dumps(a)} for name, a in items]
    )


@pytest.mark.parametrize(
    "arguments",
    [
        {"base": 10, "height": 5},  # optional unit left out
        {"base": 10, "height": 5, "unit": "units"},
        {"base": 10.0, "height": 5},  # an integer equals a float
        {"base": 10, "height": 5, "unit": " UNITS"},  # case and spaces ignored
    ],
)
def test_accepts_the_right_function_with_accepted_values(arguments: dict[str, Any]) -> None:
    assert grade("tool_call", calls(("calculate_triangle_area", arguments)), TRIANGLE) == 1.0


@pytest.mark.parametrize(
    ("response", "why"),
    [
        (calls(("calculate_circle_area", {"base": 10, "height": 5})), "other function"),
        (calls(("calculate_triangle_area", {"base": 10})), "required argument missing"),
        (calls(("calculate_triangle_area", {"base": 11, "height": 5})), "value not accepted"),
        (calls(("calculate_triangle_area", {"base": "10", "height": 5})), "a string is no number"),
        (calls(("calculate_triangle_area", {"base": 10, "height": 5, "unit": "cm"})), "optional but wrong"),
        (calls(("calculate_triangle_area", {"base": 10, "height": 5, "color": "red"})), "unknown argument"),
        (calls(("calculate_triangle_area", '{"base": 10, "height": 5')), "arguments not JSON"),
        (calls(("calculate_triangle_area", "[10, 5]")), "arguments not an object"),
        (
            calls(
                ("calculate_triangle_area", {"base": 10, "height": 5}),
            )
            * 2,
            "one call too many",
        ),
        ("The area is 25 square units.", "text, no call"),
        ("", "empty answer"),
    ],
)
def test_rejects_wrong_calls(response: str, why: str) -> None:
    assert grade("tool_call", response, TRIANGLE) == 0.0, why


def test_a_boolean_is_not_a_number() -> None:
    answer = json.dumps([{"f": {"flag": [True]}}])
    assert grade("tool_call", calls(("f", {"flag": True})), answer) == 1.0
    assert grade("tool_call", calls(("f", {"flag": 1})), answer) == 0.0
    assert grade("tool_call", calls(("f", {"flag": 1})), json.dumps([{"f": {"flag": [1]}}])) == 1.0
    assert grade("tool_call", calls(("f", {"flag": True})), json.dumps([{"f": {"flag": [1]}}])) == 0.0


def test_strings_compare_after_bfcl_normalization() -> None:
    answer = json.dumps([{"book": {"date": ["April 1, 2024"], "city": ["New York, NY"]}}])
    right = {"date": "april 1 2024", "city": "New-York NY"}
    wrong = {"date": "April 2, 2024", "city": "New York, NY"}
    assert grade("tool_call", calls(("book", right)), answer) == 1.0
    assert grade("tool_call", calls(("book", wrong)), answer) == 0.0


def test_parallel_calls_match_in_any_order_and_each_once() -> None:
    swift = ("spotify_play", {"artist": "Taylor Swift", "duration": 20})
    maroon = ("spotify_play", {"artist": "Maroon 5", "duration": 15})
    assert grade("tool_call", calls(swift, maroon), SPOTIFY) == 1.0
    assert grade("tool_call", calls(maroon, swift), SPOTIFY) == 1.0
    assert grade("tool_call", calls(swift, swift), SPOTIFY) == 0.0  # the same call twice
    assert grade("tool_call", calls(swift), SPOTIFY) == 0.0  # one missing
    assert grade("tool_call", calls(swift, maroon, maroon), SPOTIFY) == 0.0


def test_nested_objects_and_lists_compare_recursively() -> None:
    good = {"conditions": {"department": "science", "school": "Bluebird HS"}, "fields": ["name", "age"]}
    assert grade("tool_call", calls(("db_fetch", good)), NESTED) == 1.0
    assert grade("tool_call", calls(("db_fetch", {**good, "limit": 10})), NESTED) == 1.0
    wrong = [
        {**good, "fields": ["age", "name"]},  # list order matters
        {**good, "fields": ["name"]},
        {**good, "conditions": {"department": "Science"}},  # nested key missing
        {**good, "conditions": {**good["conditions"], "year": 2024}},  # nested key unknown
        {**good, "conditions": "Science"},
    ]
    for arguments in wrong:
        assert grade("tool_call", calls(("db_fetch", arguments)), NESTED) == 0.0, arguments


def test_irrelevance_any_call_is_wrong_and_no_call_is_right() -> None:
    assert grade("tool_call", "[]", "[]") == 1.0
    assert grade("tool_call", "I cannot answer that with the given functions.", "[]") == 1.0
    assert grade("tool_call", calls(("calculate_triangle_area", {"base": 1, "height": 2})), "[]") == 0.0


def test_an_accepted_answer_not_in_bfcl_form_is_a_grader_error() -> None:
    with pytest.raises(GraderError, match="not JSON"):
        grade("tool_call", "[]", "base=10")
    with pytest.raises(GraderError, match="must be lists"):
        grade("tool_call", "[]", json.dumps([{"f": {"x": 1}}]))
