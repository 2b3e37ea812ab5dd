"""Build the committed tool-calling prompt sets from the Berkeley Function Calling Leaderboard (BFCL v4).

``python -m collection.bfcl OUT.jsonl [--heldout HELDOUT.jsonl --heldout-share 0.3] [--n 60]
[--seed 0] [--wheel PATH]`` reads the questions (``bfcl_eval/data/BFCL_v4_<category>.json``) and
their accepted answers (``bfcl_eval/data/possible_answer/``) from the PyPI wheel
``bfcl-eval==2026.3.23`` (Apache-2.0; downloaded with pip unless ``--wheel`` names a local copy;
its SHA-256 must be the pinned one), samples ``--n`` questions per category with a seeded
generator, and writes them as prompt-set rows (``collection.prompts``) with the question's
``messages``, the functions as OpenAI ``tools``, ``tool_choice: auto``, the accepted answers as
JSON in ``answer`` and the ``tool_call`` grader. With ``--heldout``, a seeded ``--heldout-share``
of every category goes to a second file instead (questions a policy is never calibrated on).

BFCL writes parameter types in its own vocabulary; they become JSON Schema (``dict`` -> ``object``,
``float`` -> ``number``, ``tuple`` -> ``array``, ``any`` -> no type, BFCL's ``optional`` flag
dropped). OpenAI function names allow only ``[a-zA-Z0-9_-]``, so a dotted name such as
``math.factorial`` becomes ``math_factorial`` (BFCL does the same for such models), in the tools
and in the accepted answers alike.

A few BFCL questions contradict themselves: no call made of their first accepted values passes
their own answer key, or it violates their own function's schema (a required parameter BFCL
lets the call leave out, an accepted value outside the declared enum). A correct answer to such a
question would be graded wrong or fail the structural checks, so they are left out
(``self_consistent``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from graders import grade
from policies.answer_checks import check_answer

PACKAGE = "bfcl-eval==2026.3.23"
WHEEL_SHA256 = "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a"
CATEGORIES = ("simple_python", "multiple", "parallel", "irrelevance", "live_simple")
# Completion cap per question: one call fits in 128 tokens; parallel questions ask for 2-4 calls.
MAX_TOKENS = {"parallel": 256}
DEFAULT_MAX_TOKENS = 128
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "bool": "boolean"}
_INVALID_NAME = re.compile(r"[^a-zA-Z0-9_-]")


class BfclError(Exception):
    """The wheel is not the pinned one, or a question cannot be converted."""


def tool_name(name: str) -> str:
    """A BFCL function name as a valid OpenAI function name (dots and other characters -> ``_``)."""
    return _INVALID_NAME.sub("_", name)[:64]


def json_schema(bfcl: Any) -> Any:
    """A BFCL parameter description as JSON Schema (recursively: properties, items)."""
    if isinstance(bfcl, list):
        return [json_schema(item) for item in bfcl]
    if not isinstance(bfcl, dict):
        return bfcl
    schema: dict[str, Any] = {}
    for key, value in bfcl.items():
        if key == "optional":
            continue
        if key == "type" and isinstance(value, str):
            if value != "any":
                schema["type"] = _TYPES.get(value, value)
        elif key == "properties" and isinstance(value, dict):
            schema["properties"] = {name: json_schema(prop) for name, prop in value.items()}
        elif key == "items":
            schema["items"] = json_schema(value)
        else:
            schema[key] = value
    return schema


def tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """BFCL function documents as OpenAI ``tools`` (names made valid, parameters as JSON Schema)."""
    names = [tool_name(f["name"]) for f in functions]
    if len(set(names)) != len(names):
        raise BfclError(f"function names collide once made valid: {names}")
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": function.get("description", ""),
                "parameters": json_schema(function.get("parameters") or {"type": "dict", "properties": {}}),
            },
        }
        for name, function in zip(names, functions, strict=True)
    ]


def accepted_answers(ground_truth: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """BFCL's accepted calls (``[{function: {param: [accepted values]}}]``) with valid names."""
    return [{tool_name(name): params for name, params in call.items()} for call in ground_truth]


def prompt_row(category: str, question: dict[str, Any], ground_truth: list[dict[str, Any]]) -> dict[str, Any]:
    """One prompt-set row; irrelevance questions accept no call at all (``answer`` ``[]``)."""
    turns = question["question"]
    if len(turns) != 1:
        raise BfclError(f"{question['id']}: {len(turns)} turns; only single-turn questions are converted")
    return {
        "query_id": f"bfcl-{question['id']}",
        "dataset": "bfcl",
        "subject": category,
        "messages": [{"role": m["role"], "content": m["content"]} for m in turns[0]],
        "tools": tools(question["function"]),
        "tool_choice": "auto",
        "answer": json.dumps(accepted_answers(ground_truth), ensure_ascii=False),
        "grader": "tool_call",
        "max_tokens": MAX_TOKENS.get(category, DEFAULT_MAX_TOKENS),
    }


def _first_value(accepted: Any) -> Any:
    """The first accepted value, nested objects (BFCL: key -> accepted values) included."""
    if isinstance(accepted, dict) and all(isinstance(v, list) for v in accepted.values()):
        return {k: _first_value(v[0]) for k, v in accepted.items() if v and v[0] != ""}
    if isinstance(accepted, list):
        return [_first_value(item) for item in accepted]
    return accepted


def reference_calls(answer: str) -> list[dict[str, str]]:
    """The calls made of each expected call's first accepted values (optional ones left out)."""
    calls = []
    for entry in json.loads(answer):
        ((name, params),) = entry.items()
        arguments = {k: _first_value(v[0]) for k, v in params.items() if v and v[0] != ""}
        calls.append({"name": name, "arguments": json.dumps(arguments)})
    return calls


def self_consistent(row: dict[str, Any]) -> bool:
    """Whether the reference calls pass the question's own grader and structural checks."""
    calls = reference_calls(row["answer"])
    if grade("tool_call", json.dumps(calls), row["answer"]) != 1.0:
        return False
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": f"call_{i}", "type": "function", "function": c} for i, c in enumerate(calls)],
    }
    return check_answer({"tools": row["tools"], "tool_choice": row["tool_choice"]}, message) is None


def _lines(archive: zipfile.ZipFile, member: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in archive.read(member).decode("utf-8").splitlines() if line.strip()]


def read_category(archive: zipfile.ZipFile, category: str) -> list[dict[str, Any]]:
    """Every self-consistent question of a category as a prompt-set row, in the wheel's order."""
    questions = _lines(archive, f"bfcl_eval/data/BFCL_v4_{category}.json")
    if category == "irrelevance":
        answers: dict[str, list[dict[str, Any]]] = {}
    else:
        answers = {
            a["id"]: a["ground_truth"]
            for a in _lines(archive, f"bfcl_eval/data/possible_answer/BFCL_v4_{category}.json")
        }
    rows = [prompt_row(category, q, answers.get(q["id"], [])) for q in questions]
    return [row for row in rows if self_consistent(row)]


def sha256(path: Path) -> str:
    """The file's SHA-256 (hex)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def open_wheel(path: Path) -> zipfile.ZipFile:
    """The pinned wheel, or BfclError when its SHA-256 is another."""
    digest = sha256(path)
    if digest != WHEEL_SHA256:
        raise BfclError(f"{path}: SHA-256 {digest}, expected {WHEEL_SHA256} ({PACKAGE})")
    return zipfile.ZipFile(path)


def select(
    rows: list[dict[str, Any]], n: int, heldout_share: float, seed: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``n`` rows drawn with ``seed``, split into (calibration, held-out), each in the wheel's order."""
    rng = random.Random(seed)
    chosen = rng.sample(range(len(rows)), min(n, len(rows)))
    cut = round(len(chosen) * heldout_share)
    heldout, calibration = set(chosen[:cut]), set(chosen[cut:])
    return [rows[i] for i in sorted(calibration)], [rows[i] for i in sorted(heldout)]


def interleave(groups: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Rows round-robin over the categories, so the first N questions of a file (``--limit``) mix them."""
    rows: list[dict[str, Any]] = []
    for position in range(max(map(len, groups), default=0)):
        rows += [group[position] for group in groups if position < len(group)]
    return rows


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--heldout", type=Path, help="write the held-out share of each category here")
    parser.add_argument("--heldout-share", type=float, default=0.3)
    parser.add_argument("--n", type=int, default=60, help="questions per category (both files)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--categories", default=",".join(CATEGORIES))
    parser.add_argument("--wheel", type=Path, help=f"a local copy of the {PACKAGE} wheel")
    args = parser.parse_args(argv)
    share = args.heldout_share if args.heldout else 0.0
    with tempfile.TemporaryDirectory() as tmp:
        wheel = args.wheel
        if wheel is None:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "-q", PACKAGE, "-d", tmp], check=True
            )
            wheel = next(Path(tmp).glob("bfcl_eval-*.whl"))
        calibration: list[list[dict[str, Any]]] = []
        heldout: list[list[dict[str, Any]]] = []
        with open_wheel(wheel) as archive:
            for offset, category in enumerate(args.categories.split(",")):
                cal, held = select(read_category(archive, category), args.n, share, args.seed + offset)
                calibration.append(cal)
                heldout.append(held)
    _write(args.output, interleave(calibration))
    print(f"wrote {sum(map(len, calibration))} questions to {args.output}")
    if args.heldout:
        _write(args.heldout, interleave(heldout))
        print(f"wrote {sum(map(len, heldout))} held-out questions to {args.heldout}")


if __name__ == "__main__":
    main()
