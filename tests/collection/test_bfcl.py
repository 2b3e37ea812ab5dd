"""The BFCL converter: JSON Schema types, valid names, renamed answers, contradictory questions left out."""

from __future__ import annotations

import io
import json
import zipfile

from collection.bfcl import interleave, json_schema, read_category, select, tool_name, tools
from graders import grade

FACTORIAL = {
    "id": "simple_python_1",
    "question": [[{"role": "user", "content": "Calculate the factorial of 5 using math functions."}]],
    "function": [
        {
            "name": "math.factorial",
            "description": "Calculate the factorial of a given number.",
            "parameters": {
                "type": "dict",
                "properties": {
                    "number": {"type": "integer", "description": "The number."},
                    "scale": {"type": "float", "optional": True, "default": 1.0},
                    "pair": {"type": "tuple", "items": {"type": "float"}},
                    "anything": {"type": "any"},
                },
                "required": ["number"],
            },
        }
    ],
}
# BFCL's answer key accepts a call leaving out ``number``, which its own schema requires.
CONTRADICTORY = {**FACTORIAL, "id": "simple_python_2"}


def wheel(category: str, questions: list[dict], answers: list[dict]) -> zipfile.ZipFile:
    """An in-memory archive laid out like the bfcl-eval wheel."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(
            f"bfcl_eval/data/BFCL_v4_{category}.json", "".join(json.dumps(q) + "\n" for q in questions)
        )
        archive.writestr(
            f"bfcl_eval/data/possible_answer/BFCL_v4_{category}.json",
            "".join(json.dumps(a) + "\n" for a in answers),
        )
    return zipfile.ZipFile(io.BytesIO(buffer.getvalue()))


def test_bfcl_types_become_json_schema() -> None:
    schema = json_schema(FACTORIAL["function"][0]["parameters"])
    assert schema["type"] == "object"
    assert schema["properties"]["number"] == {"type": "integer", "description": "The number."}
    assert schema["properties"]["scale"] == {"type": "number", "default": 1.0}  # BFCL's optional flag dropped
    assert schema["properties"]["pair"] == {"type": "array", "items": {"type": "number"}}
    assert schema["properties"]["anything"] == {}  # any: no type
    assert schema["required"] == ["number"]


def test_dotted_names_become_valid_openai_names_in_tools_and_answers() -> None:
    assert tool_name("math.factorial") == "math_factorial"
    assert tool_name("uber.ride v2") == "uber_ride_v2"
    assert tools(FACTORIAL["function"])[0]["function"]["name"] == "math_factorial"
    archive = wheel(
        "simple_python",
        [FACTORIAL, CONTRADICTORY],
        [
            {
                "id": "simple_python_1",
                "ground_truth": [{"math.factorial": {"number": [5], "scale": ["", 1.0]}}],
            },
            {"id": "simple_python_2", "ground_truth": [{"math.factorial": {"number": ["", 5]}}]},
        ],
    )
    (row,) = read_category(archive, "simple_python")  # the contradictory question is left out
    assert row["query_id"] == "bfcl-simple_python_1" and row["subject"] == "simple_python"
    assert row["messages"] == FACTORIAL["question"][0]
    assert row["tool_choice"] == "auto" and row["grader"] == "tool_call" and row["dataset"] == "bfcl"
    assert json.loads(row["answer"]) == [{"math_factorial": {"number": [5], "scale": ["", 1.0]}}]
    call = [{"name": "math_factorial", "arguments": '{"number": 5}'}]
    assert grade("tool_call", json.dumps(call), row["answer"]) == 1.0


def test_irrelevance_questions_accept_no_call() -> None:
    archive = wheel("irrelevance", [{**FACTORIAL, "id": "irrelevance_0"}], [])
    (row,) = read_category(archive, "irrelevance")
    assert row["answer"] == "[]"
    assert grade("tool_call", "I cannot help with that.", row["answer"]) == 1.0


def test_selection_is_seeded_disjoint_and_interleaved() -> None:
    rows = [{"query_id": str(i)} for i in range(20)]
    calibration, heldout = select(rows, 10, 0.3, seed=0)
    assert (len(calibration), len(heldout)) == (7, 3)
    assert not {r["query_id"] for r in calibration} & {r["query_id"] for r in heldout}
    assert select(rows, 10, 0.3, seed=0) == (calibration, heldout)
    assert interleave([[1, 2, 3], ["a"], [True, False]]) == [1, "a", True, 2, False, 3]
