"""One walk over a client's JSON Schema: its subschemas, what they hold, and the graph of refs and
in-place applicators (``policies.client_schemas`` decides on it).

``walk(schema, most)`` visits each subschema object once, iteratively, looking only at the keys each
one has (a few, usually), and stops past ``most`` subschemas: time linear in the schema. What it
finds that no schema may hold is ``SchemaGraph.problem``; ``in_place_paths`` counts, per subschema,
the paths of refs and same-value applicators from it (None: a loop that never consumes the value).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from policies.schema_limits import MAX_BRANCHES, MAX_IN_PLACE_PATHS

# Keywords whose value maps names to subschemas, holds a list of them, or is one (with draft 3's
# and schema-valued ``type`` entries: a ref there is refused even though no draft run follows it).
_MAP, _LIST, _ONE, _LIST_OR_ONE = 1, 2, 3, 4
_KINDS: dict[str, int] = {
    **dict.fromkeys(
        ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"), _MAP
    ),
    **dict.fromkeys(("allOf", "anyOf", "oneOf", "prefixItems"), _LIST),
    **dict.fromkeys(("items", "extends", "type", "disallow"), _LIST_OR_ONE),
    **dict.fromkeys(
        (
            "not",
            "if",
            "then",
            "else",
            "additionalItems",
            "additionalProperties",
            "unevaluatedItems",
            "unevaluatedProperties",
            "contains",
            "propertyNames",
            "contentSchema",
        ),
        _ONE,
    ),
}
# Applicators that check the same value (a cycle through only these and refs never ends).
_IN_PLACE = frozenset(
    ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "dependencies")
)
_BRANCHES = ("allOf", "anyOf", "oneOf")
_DYNAMIC_REFS = ("$dynamicRef", "$recursiveRef")


@dataclass(slots=True)
class SchemaGraph:
    """What one walk found (``problem``: the first thing no schema may hold, or None)."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    depth: int = 0
    defs: int = 0
    enum_values: int = 0
    patterns: list[str] = field(default_factory=list)
    pattern_properties: bool = False
    unevaluated_properties: bool = False
    anchors: dict[str, dict[str, Any]] = field(default_factory=dict)
    refs: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    in_place: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    problem: str | None = None


def walk(schema: dict[str, Any], most: int) -> SchemaGraph | None:
    """Every subschema object of ``schema`` and what they hold, or None past ``most`` of them."""
    graph = SchemaGraph()
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        graph.nodes.append(node)
        if len(graph.nodes) > most:
            return None
        graph.depth = max(graph.depth, depth)
        children: list[Any] = []
        in_place: list[dict[str, Any]] = []
        for key, value in node.items():
            kind = _KINDS.get(key)
            if kind is None:
                if key.startswith("$") or key in ("enum", "pattern"):
                    _special(graph, node, key, value, node is schema, children)
                continue
            found = _subschemas(kind, value)
            children += found
            if key in _IN_PLACE:
                in_place += [child for child in found if isinstance(child, dict)]
            if key in _BRANCHES and len(found) > MAX_BRANCHES and graph.problem is None:
                graph.problem = f"{key} has more than {MAX_BRANCHES} subschemas"
            elif key in ("$defs", "definitions"):
                graph.defs += len(found)
            elif key == "patternProperties" and isinstance(value, dict):
                graph.pattern_properties = True
                graph.patterns += value
            elif key == "unevaluatedProperties":
                graph.unevaluated_properties = True
        graph.in_place[id(node)] = in_place
        stack.extend((child, depth + 1) for child in children)
    return graph


def _subschemas(kind: int, value: Any) -> list[Any]:
    if kind == _MAP:
        return list(value.values()) if isinstance(value, dict) else []
    if isinstance(value, list):
        return value if kind != _ONE else []
    return [value] if kind != _LIST else []


def _special(
    graph: SchemaGraph, node: dict[str, Any], key: str, value: Any, is_root: bool, children: list[Any]
) -> None:
    """``$ref``, ``$schema``, anchors, dynamic refs, ``enum`` and ``pattern`` of one subschema."""
    if key == "$ref":
        if isinstance(value, str) and value.startswith("#"):
            graph.refs.append((node, value))
            children.append(resolve(value, graph.nodes[0], {}))  # a pointer may name any place
        elif graph.problem is None:
            shown = str(value)[:60]
            graph.problem = (
                f"$ref {shown!r} refers outside the schema (only refs inside it, '#...', are allowed)"
            )
    elif key == "enum" and isinstance(value, list):
        graph.enum_values += len(value)
    elif key == "pattern" and isinstance(value, str):
        graph.patterns.append(value)
    elif key in ("$anchor", "$dynamicAnchor") and isinstance(value, str):
        graph.anchors[value] = node
    elif key == "$schema" and not is_root and graph.problem is None:
        graph.problem = "$schema is allowed only at a schema's root"
    elif key in _DYNAMIC_REFS and graph.problem is None:
        graph.problem = f"{key} is not supported (only $ref, to a place inside the schema)"


def resolve(ref: str, root: dict[str, Any], anchors: dict[str, dict[str, Any]]) -> Any:
    """The subschema a local ref names (a JSON pointer or an anchor), or None if it names none here."""
    fragment = unquote(ref[1:])
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


def in_place_paths(graph: SchemaGraph) -> dict[int, int] | None:
    """Per subschema (``id``), the paths of refs and same-value applicators from it (capped past
    ``MAX_IN_PLACE_PATHS``); None when they loop (iterative depth-first search)."""
    edges = graph.in_place
    root = graph.nodes[0]
    for node, ref in graph.refs:
        target = resolve(ref, root, graph.anchors)
        if isinstance(target, dict):
            edges[id(node)] = [*edges[id(node)], target]
    paths: dict[int, int] = {id(node): 1 for node in graph.nodes if not edges[id(node)]}
    on_path: set[int] = set()
    for start in graph.nodes:
        if id(start) in paths:
            continue
        on_path.add(id(start))
        stack: list[tuple[dict[str, Any], Iterator[dict[str, Any]]]] = [(start, iter(edges[id(start)]))]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                on_path.discard(id(node))
                count = 1 + sum(paths[id(target)] for target in edges[id(node)])
                paths[id(node)] = min(count, MAX_IN_PLACE_PATHS + 1)
                continue
            if id(child) in on_path:
                return None
            if id(child) not in paths:
                on_path.add(id(child))
                stack.append((child, iter(edges[id(child)])))
    return paths
