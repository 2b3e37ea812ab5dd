"""A client's JSON Schema as data, never code: local refs only, bounded work, bounded memory.

Schemas reach the gateway in tool ``parameters`` and ``response_format`` (and the Responses and
Messages fields translated into them); answers are checked against them (``policies.answer_checks``).
Four rules keep such a schema from reaching past the gateway or holding its event loop:

* **No network or file access.** A ``$ref`` must point inside the schema (``#``,
  ``#/json/pointer``, ``#anchor``; ``$dynamicRef`` and ``$recursiveRef`` are refused); validators
  resolve refs in a registry whose retrieve function refuses every URI, so even a ref that slips
  past the check (an ``$id`` that changes the base URI) is an unresolvable ref, never a fetch. A
  ref loop that never consumes the instance (``{"$ref": "#"}``, ``a -> b -> a`` through refs and
  in-place applicators) is refused.
* **Bounded work.** A schema is accepted within the limits of ``policies.schema_limits``, checked
  in one walk linear in its size (``policies.schema_graph``), and compiled in linear time; each
  answer check is counted against a budget of steps (``policies.schema_work``).
* **Linear-time matching.** ``pattern`` and ``patternProperties`` run on RE2 (google-re2): time
  linear in the text, whatever the pattern. A pattern RE2 cannot run (lookaround, backreferences)
  is refused, and so is ``unevaluatedProperties`` beside ``patternProperties`` (jsonschema would
  match those with Python's backtracking ``re``).
* **Bounded memory.** Compiled validators and regexes are kept by the bytes of their source, not by
  count (``ByteBoundedCache``).

``schema_problem(schema, allowance)`` says why a schema is refused (the gateway answers 400), or
None; ``cached_validator(schema_json)`` is the compiled schema (None: not checkable).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson
import re2
from jsonschema import ValidationError
from jsonschema.validators import extend
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource

from policies.schema_graph import SchemaGraph, in_place_paths, walk
from policies.schema_limits import (
    MAX_IN_PLACE_PATHS,
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_NODES,
    SchemaAllowance,
    draft_of,
    keyword_malformed,
)
from policies.schema_work import (
    MATCH_STEPS,
    HashedEnum,
    charge,
    counted,
    counted_unevaluated,
    enum,
    unique_items,
)

# Bytes of schema JSON whose compiled validators are kept (a validator's objects are a small
# multiple of its JSON). A schema larger than this is compiled for each use, never kept.
VALIDATOR_CACHE_BYTES = 8 * 1024 * 1024
# Per compiled pattern: RE2's memory budget (its DFA falls back to the NFA, still linear, past it)
# and what the regex cache counts it as, on top of the pattern's own length.
_RE2_MAX_MEM = 256 * 1024
_REGEX_CACHE_BYTES = 16 * 1024 * 1024
# A schema nested deeper than this is not checked: jsonschema's recursion would stop before it.
MAX_CHECKED_DEPTH = 100

K = TypeVar("K")
V = TypeVar("V")


class ByteBoundedCache(Generic[K, V]):
    """A least-recently-used cache bounded by the bytes its entries are counted as, not their number."""

    def __init__(self, budget: int):
        """``budget``: the most bytes kept; an entry counted as more is never kept."""
        self.budget = budget
        self.size = 0
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()

    def get_or_make(self, key: K, cost: int, make: Callable[[], V]) -> V:
        """The cached value of ``key``, or ``make()`` kept under ``cost`` bytes (evicting the oldest)."""
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
            return found[0]
        value = make()
        if cost <= self.budget:
            self._entries[key] = (value, cost)
            self.size += cost
            while self.size > self.budget:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.size -= dropped
        return value

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every entry."""
        self._entries.clear()
        self.size = 0


class UnrunnablePattern(ValueError):
    """A pattern RE2 cannot run (lookaround, backreferences, a repeat over 1,000, bad syntax)."""


_HEX = frozenset("0123456789abcdefABCDEF")


def _re2_syntax(pattern: str) -> str:
    """A JSON Schema (ECMA-262) pattern in RE2's syntax: ``\\uXXXX`` escapes become ``\\x{XXXX}``
    (the rest of the common syntax is shared). One pass; an escaped backslash stays one."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "\\" and i + 1 < n:
            code = pattern[i + 2 : i + 6]
            if pattern[i + 1] == "u" and len(code) == 4 and all(c in _HEX for c in code):
                out.append("\\x{" + code + "}")
                i += 6
            else:
                out.append(pattern[i : i + 2])
                i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


def _compile(pattern: str) -> Any:
    options = re2.Options()
    options.max_mem = _RE2_MAX_MEM
    options.log_errors = False
    try:
        return re2.compile(_re2_syntax(pattern) if "\\u" in pattern else pattern, options)
    except re2.error as exc:
        raise UnrunnablePattern(f"pattern {pattern[:60]!r} cannot be run in linear time ({exc})") from None


_regexes: ByteBoundedCache[str, Any] = ByteBoundedCache(_REGEX_CACHE_BYTES)


def regex(pattern: str) -> Any:
    """The compiled RE2 regex of ``pattern`` (cached by bytes); UnrunnablePattern if RE2 refuses it."""
    return _regexes.get_or_make(pattern, len(pattern) * 4 + _RE2_MAX_MEM, lambda: _compile(pattern))


def _matches(pattern: str, text: str) -> bool:
    return regex(pattern).search(text) is not None


# --- the RE2 keywords (replacing jsonschema's, which call Python's re) ---------------------------


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _matches(pattern, instance):
        yield ValidationError(f"{instance[:80]!r} does not match {pattern[:80]!r}")


def _pattern_properties(
    validator: Any, patterns: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    charge(MATCH_STEPS * len(patterns) * len(instance))  # every pattern is matched against every key
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _matches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, extra: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    charge(MATCH_STEPS * len(patterns) * len(instance))  # every pattern is matched against every key
    extras = [
        key
        for key in instance
        if key not in properties and not any(_matches(pattern, key) for pattern in patterns)
    ]
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and extras:
        shown = ", ".join(repr(key[:40]) for key in sorted(extras)[:5])
        yield ValidationError(f"Additional properties are not allowed ({shown} unexpected)")


_RE2_KEYWORDS = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}


def _refuse_retrieval(uri: str) -> Resource[Any]:
    """The registry's retrieve function: a schema never reaches anything outside itself."""
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]


_NO_RETRIEVAL: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]
_counted_classes: dict[type, Any] = {}
_validators: ByteBoundedCache[bytes, CompiledSchema | None] = ByteBoundedCache(VALIDATOR_CACHE_BYTES)


@dataclass(frozen=True, slots=True)
class CompiledSchema:
    """A client schema ready to check answers: its validator (every keyword counted, ``pattern`` on
    RE2, ``enum`` and ``uniqueItems`` hashed) and its in-place paths by subschema."""

    validator: Any
    paths: dict[int, int]


def cached_validator(schema_json: bytes) -> CompiledSchema | None:
    """The compiled schema given as JSON (cached by the bytes of that JSON), or None when the schema
    is not valid JSON Schema or cannot be run safely (``schema_problem``)."""
    return _validators.get_or_make(schema_json, len(schema_json), lambda: _compile_schema(schema_json))


def _compile_schema(schema_json: bytes) -> CompiledSchema | None:
    """Compile a schema in time linear in its size: the up-front check, the keywords' types
    (``keyword_malformed``, instead of jsonschema's far slower ``check_schema``), enums hashed."""
    schema = orjson.loads(schema_json)
    if not isinstance(schema, dict):
        return None
    examined = _examine(schema, SchemaAllowance())
    draft = draft_of(schema)
    if isinstance(examined, str) or draft is None:
        return None
    graph, paths = examined
    if graph.depth > MAX_CHECKED_DEPTH:
        return None
    if any(keyword_malformed(node, draft) is not None for node in graph.nodes):
        return None
    schema.pop("$schema", None)  # this copy is ours: a ref back to the root must not switch class
    for node in graph.nodes:
        if isinstance(node.get("enum"), list):
            node["enum"] = HashedEnum(node["enum"])
    return CompiledSchema(_counted_class(draft)(schema, registry=_NO_RETRIEVAL), paths)


def _counted_class(draft: Any) -> Any:
    """``draft``'s validator with every keyword charged to the running check (``schema_work``)."""
    found = _counted_classes.get(draft)
    if found is None:
        keywords = {name: counted(name, keyword) for name, keyword in draft.VALIDATORS.items()}
        keywords.update({name: counted(name, keyword) for name, keyword in _RE2_KEYWORDS.items()})
        keywords["enum"] = counted("enum", enum)
        keywords["uniqueItems"] = counted("uniqueItems", unique_items)
        for name in ("unevaluatedItems", "unevaluatedProperties"):
            if name in draft.VALIDATORS:
                keywords[name] = counted_unevaluated(draft.VALIDATORS[name])
        found = _counted_classes[draft] = extend(draft, keywords)
    return found


# --- the up-front check ----------------------------------------------------------------------------


def schema_problem(schema: Any, allowance: SchemaAllowance | None = None) -> str | None:
    """Why a client's JSON Schema is refused, or None: over a limit (``policies.schema_limits``;
    ``allowance``: what the request's other schemas left), a draft the gateway does not run, a ref
    outside it or dynamic, a ref loop, a pattern RE2 cannot run, ``unevaluatedProperties`` beside
    ``patternProperties``. Time linear in the schema, stopped at the limits."""
    if isinstance(schema, bool):
        return None
    if not isinstance(schema, dict):
        return "a schema must be an object or a boolean"
    examined = _examine(schema, allowance or SchemaAllowance())
    return examined if isinstance(examined, str) else None


def _examine(schema: dict[str, Any], allowance: SchemaAllowance) -> tuple[SchemaGraph, dict[int, int]] | str:
    """The schema's walk and in-place paths, or why it is refused."""
    try:
        size = len(orjson.dumps(schema))
    except orjson.JSONEncodeError:
        return "the schema nests too deeply to be read"
    if size > allowance.bytes:  # before any walk: a schema's bytes bound its work
        return f"the request's schemas are larger than {MAX_SCHEMA_BYTES} bytes of JSON together"
    if draft_of(schema) is None:
        shown = str(schema.get("$schema"))[:80]
        return f"$schema {shown!r} is not a draft the gateway runs (draft-04, -06, -07, 2019-09, 2020-12)"
    graph = walk(schema, max(allowance.nodes, 0))
    if graph is None:
        return f"the request's schemas have more than {MAX_SCHEMA_NODES} subschemas together"
    problem = graph.problem or allowance.take(
        size=size, nodes=len(graph.nodes), defs=graph.defs, enum_values=graph.enum_values
    )
    if problem is not None:
        return problem
    if graph.pattern_properties and graph.unevaluated_properties:
        return "patternProperties beside unevaluatedProperties is not supported"
    for pattern in set(graph.patterns):  # each compiled once, its program charged
        try:
            problem = allowance.take_pattern(regex(pattern).programsize)
        except UnrunnablePattern as exc:
            return str(exc)
        if problem is not None:
            return problem
    paths = in_place_paths(graph)
    if paths is None:
        return "the schema's $ref loops back to itself without validating anything in between"
    if max(paths.values(), default=0) > MAX_IN_PLACE_PATHS:
        return f"more than {MAX_IN_PLACE_PATHS} paths of refs and allOf/anyOf/oneOf check one value"
    return graph, paths
