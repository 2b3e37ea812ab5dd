"""A client's JSON Schema as data, never code: local refs only, linear-time patterns, bounded memory.

Schemas reach the gateway in tool ``parameters`` and ``response_format`` (and the Responses and
Messages fields translated into them); answers are checked against them (``policies.answer_checks``).
Three rules keep such a schema from reaching past the gateway:

* **No network or file access.** A ``$ref`` (``$dynamicRef``, ``$recursiveRef``) must point inside
  the schema (``#``, ``#/json/pointer``, ``#anchor``); validators resolve refs in a registry whose
  retrieve function refuses every URI, so even a ref that slips past the check (an ``$id`` that
  changes the base URI) is an unresolvable ref, never a fetch. A ref loop that never consumes the
  instance (``{"$ref": "#"}``, ``a -> b -> a`` through refs and in-place applicators) is refused.
* **Linear-time matching.** ``pattern`` and ``patternProperties`` run on RE2 (google-re2): time
  linear in the text, whatever the pattern. A pattern RE2 cannot run (lookaround, backreferences)
  is refused, and so is ``unevaluatedProperties`` beside ``patternProperties`` (jsonschema would
  match those with Python's backtracking ``re``).
* **Bounded memory.** Compiled validators and regexes are kept by the bytes of their source, not by
  count (``ByteBoundedCache``).

``schema_problem(schema)`` says why a schema is refused (the gateway answers 400), or None;
``cached_validator(schema_json)`` is the compiled validator of a schema (None: not checkable).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar
from urllib.parse import unquote

import orjson
import re2
from jsonschema import SchemaError, ValidationError
from jsonschema.validators import extend, validator_for
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource

# Bytes of schema JSON whose compiled validators are kept (a validator's objects are a small
# multiple of its JSON). A schema larger than this is compiled for each use, never kept.
VALIDATOR_CACHE_BYTES = 8 * 1024 * 1024
# Per compiled pattern: RE2's memory budget (its DFA falls back to the NFA, still linear, past it)
# and what the regex cache counts it as, on top of the pattern's own length.
_RE2_MAX_MEM = 256 * 1024
_REGEX_CACHE_BYTES = 16 * 1024 * 1024
# The most schema nodes one schema may hold (a request body bounds it anyway; this bounds the work).
MAX_SCHEMA_NODES = 100_000

_REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
# Keywords whose value maps names to subschemas, holds a list of them, or is one.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_SCHEMA_ONE = (
    "not",
    "if",
    "then",
    "else",
    "items",
    "additionalItems",
    "additionalProperties",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contains",
    "propertyNames",
)
# Applicators that validate the same instance (a cycle through only these never ends).
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("not", "if", "then", "else")

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
_linear_classes: dict[type, Any] = {}
_validators: ByteBoundedCache[bytes, Any] = ByteBoundedCache(VALIDATOR_CACHE_BYTES)


def cached_validator(schema_json: bytes) -> Any:
    """The validator of a schema given as JSON (cached by the bytes of that JSON), or None when the
    schema is not valid JSON Schema or cannot be run safely (``schema_problem``)."""
    return _validators.get_or_make(schema_json, len(schema_json), lambda: _make_validator(schema_json))


def _make_validator(schema_json: bytes) -> Any:
    schema = orjson.loads(schema_json)
    if schema_problem(schema) is not None:
        return None
    cls = validator_for(schema)
    try:
        cls.check_schema(schema)
    except (SchemaError, RecursionError):  # invalid, or nested past what jsonschema can walk
        return None
    linear = _linear_classes.get(cls)
    if linear is None:
        linear = _linear_classes[cls] = extend(cls, _RE2_KEYWORDS)
    return linear(schema, registry=_NO_RETRIEVAL)


# --- the up-front check ----------------------------------------------------------------------------


def schema_problem(schema: Any) -> str | None:
    """Why a client's JSON Schema is refused, or None: a ``$ref`` outside it, a ref loop, a pattern
    RE2 cannot run, ``unevaluatedProperties`` beside ``patternProperties``, or too many nodes."""
    if isinstance(schema, bool):
        return None
    if not isinstance(schema, dict):
        return "a schema must be an object or a boolean"
    nodes = _schema_nodes(schema)
    if nodes is None:
        return f"the schema has more than {MAX_SCHEMA_NODES} subschemas"
    anchors = {
        node[key]: node
        for node in nodes
        for key in ("$anchor", "$dynamicAnchor")
        if isinstance(node.get(key), str)
    }
    uses_unevaluated = any("unevaluatedProperties" in node for node in nodes)
    edges: dict[int, list[dict[str, Any]]] = {}
    for node in nodes:
        problem = _node_problem(node, uses_unevaluated)
        if problem is not None:
            return problem
        targets = [_resolve(node[key], schema, anchors) for key in _REF_KEYWORDS if key in node]
        targets += [s for key in _IN_PLACE_LISTS for s in _listed(node.get(key))]
        targets += [node[key] for key in _IN_PLACE_ONE if isinstance(node.get(key), dict)]
        edges[id(node)] = [t for t in targets if isinstance(t, dict)]
    if _has_cycle(nodes, edges):
        return "the schema's $ref loops back to itself without validating anything in between"
    return None


def _node_problem(node: dict[str, Any], uses_unevaluated: bool) -> str | None:
    for key in _REF_KEYWORDS:
        ref = node.get(key)
        if key in node and (not isinstance(ref, str) or not ref.startswith("#")):
            shown = str(ref)[:60]
            return f"{key} {shown!r} refers outside the schema (only refs inside it, '#...', are allowed)"
    patterns: list[Any] = []
    if "pattern" in node:
        patterns.append(node["pattern"])
    if isinstance(node.get("patternProperties"), dict):
        if uses_unevaluated:
            return "patternProperties beside unevaluatedProperties is not supported"
        patterns.extend(node["patternProperties"])
    for pattern in patterns:
        if not isinstance(pattern, str):
            continue  # not valid JSON Schema: the schema is not checked at all
        try:
            regex(pattern)
        except UnrunnablePattern as exc:
            return str(exc)
    return None


def _schema_nodes(schema: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Every subschema object of ``schema`` (iteratively, each once), or None past the bound."""
    seen: set[int] = set()
    found: list[dict[str, Any]] = []
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        found.append(node)
        if len(found) > MAX_SCHEMA_NODES:
            return None
        # A pointer may name a subschema outside the keywords walked (``#/x``): walk it too.
        stack.extend(_resolve(node[key], schema, {}) for key in _REF_KEYWORDS if key in node)
        for key in _SCHEMA_MAPS:
            value = node.get(key)
            if isinstance(value, dict):
                stack.extend(value.values())
        for key in _SCHEMA_LISTS:
            stack.extend(_listed(node.get(key)))
        stack.extend(node[key] for key in _SCHEMA_ONE if isinstance(node.get(key), dict))
    return found


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _resolve(ref: Any, root: dict[str, Any], anchors: dict[str, dict[str, Any]]) -> Any:
    """The subschema a local ref names (a JSON pointer or an anchor), or None if it names none here."""
    fragment = unquote(ref[1:]) if isinstance(ref, str) else ""
    if not fragment:
        return root
    if not fragment.startswith("/"):
        return anchors.get(fragment)
    node: Any = root
    for token in fragment[1:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node


def _has_cycle(nodes: list[dict[str, Any]], edges: dict[int, list[dict[str, Any]]]) -> bool:
    """Whether the in-place graph (refs and same-instance applicators) has a cycle (iterative DFS)."""
    state: dict[int, int] = {}  # 1: on the current path, 2: done
    for start in nodes:
        if id(start) in state:
            continue
        state[id(start)] = 1
        path: list[tuple[dict[str, Any], Iterator[dict[str, Any]]]] = [(start, iter(edges[id(start)]))]
        while path:
            _, children = path[-1]
            child = next(children, None)
            if child is None:
                state[id(path.pop()[0])] = 2
                continue
            mark = state.get(id(child))
            if mark == 1:
                return True
            if mark is None:
                state[id(child)] = 1
                path.append((child, iter(edges.get(id(child), ()))))
    return False
