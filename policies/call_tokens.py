"""Which generated tokens spell the decisions of a tool call (docs/scorers.md#scoring-a-calls-decisions).

A call written as JSON (``{"name": ..., "arguments": {...}}``) is mostly formatting: the fence, braces,
keys, quotes and indentation are nearly certain once the model has chosen to call, and they dominate
a whole-answer score. The decisions are the function name and each argument value. ``ScorerSpec.tokens
= "call_values"`` scores only the tokens that overlap those decisions, with the scorer's own formula.

The tokens are aligned to the text they spell: the UTF-8 bytes of each ``logprobs.content`` entry
(its ``bytes`` when present, else its ``token``), concatenated. The same function scores live replies
(``policies.scorers.score_response``) and recorded logprobs (calibration), and it reads nothing but
the logprob entries, so both sides select the same positions. A native call whose tokens are all in
``logprobs.content`` (vLLM, llama-server: the raw text with its ``<tool_call>`` tags) aligns the
same way.

What counts as a call: the text is wholly one or more call objects (``name`` a string, other keys
among ``arguments``/``parameters``), bare, in a JSON list, inside fenced code blocks or
``<tool_call>`` tags, with only whitespace and commas between them (as ``policies.tool_calls``
reads calls written as content). Anything else (text, other JSON, a truncated call, tokens that do
not spell valid JSON) is not a call and every token is scored, as with ``tokens = "all"``.

Decision spans, in bytes of the text: a string's characters without its quotes (an empty string: its
closing quote, the choice to end it), a number or literal as written, an empty object or list as
written; objects and lists inside an argument are walked down to these leaves (their keys are not
decisions). A token is selected when its bytes overlap a span: a token that straddles a boundary
(``"Par`` of ``"Paris"``) is selected; one that only touches it (``",``) is not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from policies.errors import UnknownScorerError

ScoreTokens = Literal["all", "call_values"]
SCORE_TOKENS: tuple[ScoreTokens, ...] = ("all", "call_values")

# One JSON lexeme per match; ``o`` is anything else (a fence, a tag, prose), which ends a call.
_LEXEME = re.compile(
    rb'(?P<s>"(?:[^"\\]|\\.)*")'
    rb"|(?P<n>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"
    rb"|(?P<l>true|false|null)"
    rb"|(?P<p>[{}\[\]:,])"
    rb"|(?P<w>\s+)"
    rb'|(?P<o>[^"{}\[\]:,\s]+|.)',
    re.S,
)
# Text allowed around calls: fences (with a language) and the tags of Hermes-style templates.
_DECORATION = re.compile(rb"```[A-Za-z]*|</?tool_call>")
_CALL_KEYS = frozenset((b"name", b"arguments", b"parameters"))
_NAME_KEY = b'"name"'

# A parsed JSON value: (kind, start, end, children). kind is one lexeme group (s, n, l) or "{"/"[";
# children: [(key bytes, value)] for an object, [value] for a list, None for a scalar.
_Node = tuple[str, int, int, Any]


class _NotCall(Exception):
    """The text is not wholly calls (or not JSON where a call should be)."""


def select_tokens(content: Sequence[Any] | None, tokens: str) -> Sequence[Any] | None:
    """The entries of ``content`` a scorer reads under ``tokens`` (``ScorerSpec.tokens``).

    ``all``: ``content`` itself. ``call_values``: the entries that spell a call's function name and
    argument values (``call_value_positions``), or ``content`` itself when it is not a call or
    cannot be aligned. Another value: UnknownScorerError.
    """
    if tokens == "all":
        return content
    if tokens != "call_values":
        raise UnknownScorerError(f"unknown score tokens {tokens!r}; choose one of {', '.join(SCORE_TOKENS)}")
    if not content:
        return content
    positions = call_value_positions(content)
    if not positions:
        return content
    return [content[i] for i in positions]


def call_value_positions(content: Sequence[Any]) -> list[int] | None:
    """Indices of the entries whose bytes overlap a call's name or argument values, in order;
    None when the entries do not spell calls (or an entry has no text to align)."""
    aligned = token_text(content)
    if aligned is None:
        return None
    text, starts = aligned
    if _NAME_KEY not in text:  # cheap exit for text answers
        return None
    spans = call_value_spans(text)
    if not spans:
        return None
    positions = []
    span = 0
    for index in range(len(starts) - 1):
        start, end = starts[index], starts[index + 1]
        if start == end:  # an empty entry (end of text) spells nothing
            continue
        while span < len(spans) and spans[span][1] <= start:
            span += 1
        if span == len(spans):
            break
        if spans[span][0] < end:
            positions.append(index)
    return positions


def token_text(content: Sequence[Any]) -> tuple[bytes, list[int]] | None:
    """The bytes the entries spell and each entry's start offset (plus the end), or None when an
    entry is not an object with a ``token`` string (or a ``bytes`` list)."""
    pieces = []
    for entry in content:
        if not isinstance(entry, Mapping):
            return None
        raw = entry.get("bytes")
        if raw:
            try:
                pieces.append(bytes(raw))
            except (TypeError, ValueError):
                return None
            continue
        token = entry.get("token")
        if not isinstance(token, str):
            return None
        pieces.append(token.encode("utf-8", "surrogatepass"))
    starts = [0]
    total = 0
    for piece in pieces:
        total += len(piece)
        starts.append(total)
    return b"".join(pieces), starts


def call_value_spans(text: bytes) -> list[tuple[int, int]] | None:
    """Byte spans ``[start, end)`` of every call's name and argument values in ``text``, in order,
    or None when ``text`` is not wholly calls (module docstring)."""
    lexemes = [(m.lastgroup or "o", m.start(), m.end()) for m in _LEXEME.finditer(text) if m.lastgroup != "w"]
    spans: list[tuple[int, int]] = []
    index, found = 0, False
    try:
        while index < len(lexemes):
            kind, start, end = lexemes[index]
            if kind == "p" and text[start] in b"{[":
                node, index = _value(text, lexemes, index)
                for call in node[3] if node[0] == "[" else [node]:
                    _call_spans(text, call, spans)
                found = True
            elif (kind == "p" and text[start] == 0x2C) or (  # "," between calls
                kind == "o" and _DECORATION.fullmatch(text, start, end)
            ):
                index += 1
            else:
                return None
    except (_NotCall, RecursionError):
        return None
    return spans if found else None


def _value(text: bytes, lexemes: list[tuple[str, int, int]], index: int) -> tuple[_Node, int]:
    """The JSON value starting at lexeme ``index`` and the index after it; _NotCall if invalid."""
    if index >= len(lexemes):
        raise _NotCall
    kind, start, end = lexemes[index]
    if kind in ("s", "n", "l"):
        return (kind, start, end, None), index + 1
    if kind != "p" or text[start] not in b"{[":
        raise _NotCall
    is_object = text[start] == 0x7B
    closing = 0x7D if is_object else 0x5D
    children: list[Any] = []
    index += 1
    while True:
        if index >= len(lexemes):
            raise _NotCall
        kind, item_start, item_end = lexemes[index]
        if kind == "p" and text[item_start] == closing and not children:  # {} or []
            return ("{" if is_object else "[", start, item_end, children), index + 1
        if is_object:
            if kind != "s" or index + 1 >= len(lexemes) or text[lexemes[index + 1][1]] != 0x3A:
                raise _NotCall
            value, index = _value(text, lexemes, index + 2)
            children.append((text[item_start + 1 : item_end - 1], value))
        else:
            value, index = _value(text, lexemes, index)
            children.append(value)
        if index >= len(lexemes) or lexemes[index][0] != "p":
            raise _NotCall
        separator = text[lexemes[index][1]]
        if separator == closing:
            return ("{" if is_object else "[", start, lexemes[index][2], children), index + 1
        if separator != 0x2C:
            raise _NotCall
        index += 1


def _call_spans(text: bytes, node: _Node, spans: list[tuple[int, int]]) -> None:
    """Append the decision spans of one call object; _NotCall if ``node`` is not a call."""
    if node[0] != "{":
        raise _NotCall
    members = dict(node[3])
    name = members.get(b"name")
    if name is None or name[0] != "s" or not set(members) <= _CALL_KEYS:
        raise _NotCall
    _leaf_spans(name, spans)
    for key in (b"arguments", b"parameters"):
        if key in members:
            _leaf_spans(members[key], spans)


def _leaf_spans(node: _Node, spans: list[tuple[int, int]]) -> None:
    kind, start, end, children = node
    if kind == "s":
        # The characters without the quotes; an empty string's decision is its closing quote.
        spans.append((start + 1, end - 1) if end - start > 2 else (end - 1, end))
    elif children:
        for child in children:
            _leaf_spans(child[1] if kind == "{" else child, spans)
    else:  # a number, a literal, an empty object or list
        spans.append((start, end))
