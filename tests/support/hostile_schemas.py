"""Client JSON Schemas at and just past the gateway's stated limits (policies/schema_limits.py), for
the tests that refuse them on arrival and check answers against the largest accepted ones."""

from __future__ import annotations

from typing import Any

from policies.schema_limits import (
    MAX_BRANCHES,
    MAX_DEFS,
    MAX_ENUM_VALUES,
    MAX_IN_PLACE_PATHS,
    MAX_PATTERN_PROGRAM,
    MAX_PATTERNS,
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_NODES,
)


def array_of(items: Any, **more: Any) -> dict[str, Any]:
    """An object whose ``items`` property is an array of ``items`` (with ``more`` array keywords)."""
    return {"type": "object", "properties": {"items": {"type": "array", "items": items, **more}}}


def branches(count: int) -> dict[str, Any]:
    """An ``anyOf`` of ``count`` objects, the i-th with ``kind: "k<i>"``."""
    kinds = [
        {"type": "object", "properties": {"kind": {"const": f"k{i}"}}, "required": ["kind"]}
        for i in range(count)
    ]
    return {"anyOf": kinds}


def defs(count: int) -> dict[str, Any]:
    """``count`` ``$defs`` (one used)."""
    found = {f"d{i}": {"type": "object", "properties": {"p": {"type": "string"}}} for i in range(count)}
    return {"type": "object", "$defs": found, "properties": {"x": {"$ref": "#/$defs/d0"}}}


def doubling(links: int) -> dict[str, Any]:
    """``l0 -> anyOf[l1, l1] -> ...``: about 2^(links + 2) in-place paths at the items (8: 1,022)."""
    found: dict[str, Any] = {f"l{i}": {"anyOf": [{"$ref": f"#/$defs/l{i + 1}"}] * 2} for i in range(links)}
    found[f"l{links}"] = {"type": "string"}
    return {**array_of({"$ref": "#/$defs/l0"}), "$defs": found}


def subschemas(count: int) -> dict[str, Any]:
    """``count`` subschemas: the root and its properties' (``p0``, ``p1``, ...: strings)."""
    return {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(count - 1)}}


def patterns(count: int, repeat: int = 1) -> dict[str, Any]:
    """``count`` distinct ``pattern`` keywords (``^[a-z]{1,<repeat>}<i>$``: about 2 RE2 instructions
    per repeat)."""
    found = {f"p{i}": {"type": "string", "pattern": f"^[a-z]{{1,{repeat}}}{i}$"} for i in range(count)}
    return {"type": "object", "properties": found}


# One schema just past each limit and the words of its refusal.
OVER_LIMITS: dict[str, tuple[dict[str, Any], str]] = {
    "bytes": ({"type": "string", "description": "x" * MAX_SCHEMA_BYTES}, f"{MAX_SCHEMA_BYTES} bytes"),
    "nodes": (subschemas(MAX_SCHEMA_NODES + 1), f"{MAX_SCHEMA_NODES} subschemas"),
    "defs": (defs(MAX_DEFS + 1), f"{MAX_DEFS} $defs"),
    "enum": (array_of({"enum": list(range(MAX_ENUM_VALUES + 1))}), f"{MAX_ENUM_VALUES} enum values"),
    "branches": (branches(MAX_BRANCHES + 1), f"more than {MAX_BRANCHES} subschemas"),
    "paths": (doubling(9), f"more than {MAX_IN_PLACE_PATHS} paths"),
    "patterns": (patterns(MAX_PATTERNS + 1), f"more than {MAX_PATTERNS} distinct patterns"),
    "pattern_program": (patterns(3, 999), f"more than {MAX_PATTERN_PROGRAM} instructions"),
    "draft": ({"$schema": "http://json-schema.org/draft-03/schema#", "type": "object"}, "not a draft"),
}
