"""The stated limits of a client's JSON Schemas, the drafts the gateway runs, and what "well-formed" means.

A request's schemas (tool ``parameters``, ``functions``, ``response_format``, and the Responses and
Messages fields translated into them) share one ``SchemaAllowance``: at most ``MAX_SCHEMA_BYTES`` of
JSON, ``MAX_SCHEMA_NODES`` subschemas, ``MAX_DEFS`` ``$defs``/``definitions`` entries and
``MAX_ENUM_VALUES`` ``enum`` values together, and ``MAX_PATTERNS`` distinct patterns compiling to
at most ``MAX_PATTERN_PROGRAM`` RE2 instructions; one ``allOf``/``anyOf``/``oneOf`` holds at most
``MAX_BRANCHES`` subschemas, and at most ``MAX_IN_PLACE_PATHS`` paths of refs and those applicators
lead from one subschema to the subschemas that check the same value (a chain of two-branch
``anyOf`` refs doubles them at each link). Each is checked in one linear walk
(``policies.client_schemas.schema_problem``); together they bound the work of compiling the
schemas (docs/contracts.md, "Client schemas").

``$schema`` names one of ``DRAFTS`` at a schema's root only (a nested ``$schema`` would switch
validators half-way). ``keyword_malformed`` replaces jsonschema's ``check_schema`` (hundreds of
microseconds a subschema on draft 2020-12): a schema whose keyword values have the wrong JSON type
is not valid JSON Schema and is not checked at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jsonschema import (
    Draft4Validator,
    Draft6Validator,
    Draft7Validator,
    Draft201909Validator,
    Draft202012Validator,
)

MAX_SCHEMA_BYTES = 256 * 1024
MAX_SCHEMA_NODES = 5_000
MAX_DEFS = 1_000
MAX_ENUM_VALUES = 5_000
MAX_BRANCHES = 256
MAX_IN_PLACE_PATHS = 1_024
# Distinct ``pattern``/``patternProperties`` regexes, and the RE2 instructions they compile to (the
# time to compile one is up to about 3 us an instruction: ``[a-z]{1,999}``, 2,019 of them, 6 ms).
MAX_PATTERNS = 32
MAX_PATTERN_PROGRAM = 5_000

# ``$schema`` (without a trailing ``#``, http or https) -> the validator that runs it. Draft 3 is
# not run: its ``extends``, ``disallow`` and schema-valued ``type`` reach refs no check walks.
DRAFTS: dict[str, Any] = {
    "json-schema.org/draft-04/schema": Draft4Validator,
    "json-schema.org/draft-06/schema": Draft6Validator,
    "json-schema.org/draft-07/schema": Draft7Validator,
    "json-schema.org/draft/2019-09/schema": Draft201909Validator,
    "json-schema.org/draft/2020-12/schema": Draft202012Validator,
}
DEFAULT_DRAFT: Any = Draft202012Validator


def draft_of(schema: dict[str, Any]) -> Any:
    """The validator class the root's ``$schema`` names (the default without one), or None when
    it names a draft the gateway does not run."""
    declared = schema.get("$schema")
    if declared is None:
        return DEFAULT_DRAFT
    if not isinstance(declared, str):
        return None
    uri = declared.removesuffix("#").removeprefix("https://").removeprefix("http://")
    return DRAFTS.get(uri)


@dataclass(slots=True)
class SchemaAllowance:
    """What one request's schemas may still use (shared by all of them, taken schema by schema)."""

    bytes: int = MAX_SCHEMA_BYTES
    nodes: int = MAX_SCHEMA_NODES
    defs: int = MAX_DEFS
    enum_values: int = MAX_ENUM_VALUES
    patterns: int = MAX_PATTERNS
    pattern_program: int = MAX_PATTERN_PROGRAM

    def take(self, *, size: int, nodes: int, defs: int, enum_values: int) -> str | None:
        """Take one schema's share; the limit it passes (with the totals), or None."""
        self.bytes -= size
        self.nodes -= nodes
        self.defs -= defs
        self.enum_values -= enum_values
        if self.bytes < 0:
            return f"the request's schemas are larger than {MAX_SCHEMA_BYTES} bytes of JSON together"
        if self.nodes < 0:
            return f"the request's schemas have more than {MAX_SCHEMA_NODES} subschemas together"
        if self.defs < 0:
            return f"the request's schemas have more than {MAX_DEFS} $defs/definitions together"
        if self.enum_values < 0:
            return f"the request's schemas have more than {MAX_ENUM_VALUES} enum values together"
        return None

    def take_pattern(self, program_size: int) -> str | None:
        """Take one compiled pattern's share; the limit it passes, or None."""
        self.patterns -= 1
        self.pattern_program -= program_size
        if self.patterns < 0:
            return f"the request's schemas have more than {MAX_PATTERNS} distinct patterns together"
        if self.pattern_program < 0:
            return (
                f"the request's schemas' patterns compile to more than {MAX_PATTERN_PROGRAM} "
                "instructions together"
            )
        return None


# --- well-formed keyword values ------------------------------------------------------------------

_TYPES = frozenset(("array", "boolean", "integer", "null", "number", "object", "string"))


def _is_schema(value: Any) -> bool:
    return isinstance(value, dict | bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _schema_map(value: Any) -> bool:
    return isinstance(value, dict) and all(_is_schema(v) for v in value.values())


def _schema_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_is_schema(v) for v in value)


def _type(value: Any) -> bool:
    return value in _TYPES if isinstance(value, str) else _strings(value) and set(value) <= _TYPES


# Keyword -> whether its value has a type every draft's validator can run.
_CHECKS: dict[str, Any] = {
    **dict.fromkeys(
        ("$ref", "$id", "$anchor", "$dynamicAnchor", "pattern", "format"), lambda v: isinstance(v, str)
    ),
    **dict.fromkeys(
        (
            "additionalItems",
            "additionalProperties",
            "unevaluatedItems",
            "unevaluatedProperties",
            "not",
            "if",
            "then",
            "else",
            "contains",
            "propertyNames",
            "contentSchema",
        ),
        _is_schema,
    ),
    **dict.fromkeys(
        ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas"), _schema_map
    ),
    **dict.fromkeys(("allOf", "anyOf", "oneOf", "prefixItems"), _schema_list),
    **dict.fromkeys(
        (
            "minLength",
            "maxLength",
            "minItems",
            "maxItems",
            "minProperties",
            "maxProperties",
            "minContains",
            "maxContains",
        ),
        _is_count,
    ),
    **dict.fromkeys(("minimum", "maximum"), _is_number),
    "type": _type,
    "multipleOf": lambda v: _is_number(v) and v > 0,
    "enum": lambda v: isinstance(v, list),
    "required": _strings,
    "uniqueItems": lambda v: isinstance(v, bool),
    "dependentRequired": lambda v: isinstance(v, dict) and all(_strings(x) for x in v.values()),
    "dependencies": lambda v: isinstance(v, dict) and all(_is_schema(x) or _strings(x) for x in v.values()),
}


def keyword_malformed(node: dict[str, Any], draft: Any) -> str | None:
    """The first keyword of ``node`` (as ``draft`` reads it) whose value has a type the validator
    cannot run, or None. Keywords the draft does not know are annotations: never malformed."""
    known = draft.VALIDATORS
    for key, value in node.items():
        check = _CHECKS.get(key)
        if check is None or (key not in known and key not in _ANY_DRAFT):
            continue
        if not check(value):
            return key
    return _draft_problem(node, draft)


# Read by the registry whatever the draft's validators (ids, anchors and the places refs point).
_ANY_DRAFT = frozenset(("$id", "$anchor", "$defs", "definitions"))


def _draft_problem(node: dict[str, Any], draft: Any) -> str | None:
    """The keywords whose valid types differ between drafts: ``items`` (a list before 2020-12),
    ``exclusiveMinimum``/``exclusiveMaximum`` (booleans in draft 4)."""
    items = node.get("items", True)
    listed = draft is not Draft202012Validator and isinstance(items, list)
    if not (_is_schema(items) or (listed and all(_is_schema(v) for v in items))):
        return "items"
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        if key in node:
            value = node[key]
            if not (isinstance(value, bool) if draft is Draft4Validator else _is_number(value)):
                return key
    return None
