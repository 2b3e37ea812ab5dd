"""Which generated tokens spell the decisions of a tool call (docs/scorers.md#scoring-a-calls-decisions).

A call written as JSON (``{"name": ..., "arguments": {...}}``) is mostly formatting: the fence, braces,
keys, quotes and indentation are nearly certain once the model has chosen to call, and they dominate
a whole-answer score. The decisions are the function name and each argument value. ``ScorerSpec.tokens
= "call_values"`` scores only the tokens that overlap those decisions, with the scorer's own formula.

The tokens are aligned to the text they spell: each ``logprobs.content`` entry's ``token`` (its
``bytes`` when the token is a piece of a character, ``token_text``), concatenated. The same
function scores live replies (``policies.scorers.score_response``) and recorded logprobs
(calibration), and it reads nothing but the logprob entries, so both sides select the same
positions. A native call whose tokens are all in ``logprobs.content`` (vLLM, llama-server: the raw
text with its ``<tool_call>`` tags) aligns the same way.

What counts as a call: the text is wholly one or more call objects (``name`` a string, other keys
among ``arguments``/``parameters``), bare, in a JSON list, inside fenced code blocks or
``<tool_call>`` tags, with only whitespace and commas between them (as ``policies.tool_calls``
reads calls written as content); or, in a model's native syntax, text followed by such calls from
the first ``<tool_call>`` tag (or after Mistral's ``[TOOL_CALLS]``) on: a server parses those into
``tool_calls`` beside the text, and only the calls' decisions are scored. Anything else (text,
other JSON, a truncated call, tokens that do not spell valid JSON) is not a call and every token
is scored, as with ``tokens = "all"``.

Decision spans, in characters of the text: a string's characters without its quotes (an empty
string: its closing quote, the choice to end it), a number or literal as written, an empty object
or list as written; objects and lists inside an argument are walked down to these leaves (their
keys are not decisions). A token is selected when its text overlaps a span: a token that straddles a boundary
(``"Par`` of ``"Paris"``) is selected; one that only touches it (``",``) is not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from itertools import accumulate
from typing import Any, Literal

from policies.errors import UnknownScorerError

ScoreTokens = Literal["all", "call_values"]
SCORE_TOKENS: tuple[ScoreTokens, ...] = ("all", "call_values")

# One JSON lexeme per match, after any whitespace: a string, a number, a literal, a punctuation mark,
# or anything else (a fence, a tag, prose), which is no part of a call.
_LEXEME = re.compile(
    r'\s*(?:("(?:[^"\\]|\\.)*")'
    r"|(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"
    r"|(true|false|null)"
    r"|([{}\[\]:,])"
    r'|([^"{}\[\]:,\s]+|.))',
    re.S,
)
# A lexeme's kind by group: s(tring), n(umber), l(iteral), punctuation (the mark itself), o(ther).
_KINDS = ("", "s", "n", "l", "", "o")
_PUNCTUATION = 4
# Text allowed around calls: fences (with a language) and the tags of Hermes-style templates.
_DECORATION = re.compile(r"```[A-Za-z]*|</?tool_call>")
# Where a model's native call syntax begins (Hermes-style tags, Mistral's marker): what comes before
# is the answer's text, which a server returns as content beside the calls it parsed.
_CALLS_BEGIN = re.compile(r"<tool_call>|\[TOOL_CALLS\]")
_CALL_KEYS = frozenset(("name", "arguments", "parameters"))
_NAME_KEY = '"name"'

# A parsed JSON value: (kind, start, end, children). kind is a lexeme kind (s, n, l) or "{" / "[";
# children: [(key, value)] for an object, [value] for a list, None for a scalar.
_Node = tuple[str, int, int, Any]
_Lexeme = tuple[str, int, int]


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
    """Indices of the entries whose text overlaps a call's name or argument values, in order;
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


def token_text(content: Sequence[Any]) -> tuple[str, list[int]] | None:
    """The text the entries spell and each entry's start offset in it (plus the end), or None when
    an entry is not an object with a ``token`` string (or ``bytes``).

    An entry's text is its ``token``; when that is empty or holds a backslash or U+FFFD (a piece of
    a character, escaped or replaced: llama.cpp sends an empty token, OpenAI ``bytes:\\x..``), its
    entry's ``bytes`` decoded, each byte that is not part of a whole UTF-8 character kept as one
    character of its own (``surrogateescape``): offsets stay consistent, and such characters can
    only sit inside a JSON string, where any character is part of the value.
    """
    try:  # the usual case: every token is its own text (empty ones aside)
        tokens: list[str] = [entry["token"] for entry in content]
        text = "".join(tokens)
    except (TypeError, KeyError):
        tokens, text = [], "\\"  # an entry without a token string: entry by entry
    if "\\" not in text and "\ufffd" not in text:
        if "" not in tokens:
            return text, [0, *accumulate(map(len, tokens))]
        pieces = [token or _entry_text(entry) for token, entry in zip(tokens, content, strict=True)]
    else:
        pieces = [_entry_text(entry) for entry in content]
    texts = [piece for piece in pieces if piece is not None]
    if len(texts) < len(pieces):
        return None
    return "".join(texts), [0, *accumulate(map(len, texts))]


def _entry_text(entry: Any) -> str | None:
    """One entry's text (``token_text``), None when it has none."""
    if not isinstance(entry, Mapping):
        return None
    token = entry.get("token")
    if type(token) is str and token and "\\" not in token and "\ufffd" not in token:
        return token
    raw = entry.get("bytes")
    if raw:
        try:
            return bytes(raw).decode("utf-8", "surrogateescape")
        except (TypeError, ValueError):
            return None
    return token if isinstance(token, str) else None


def call_value_spans(text: str) -> list[tuple[int, int]] | None:
    """Spans ``[start, end)`` of every call's name and argument values in ``text``, in order, or
    None when ``text`` is not wholly calls (module docstring)."""
    begin = _CALLS_BEGIN.search(text)
    position = 0 if begin is None else begin.start() if begin.group() == "<tool_call>" else begin.end()
    lexemes: list[_Lexeme] = []
    for match in _LEXEME.finditer(text, position):
        group = match.lastindex or 0
        start, end = match.span(group)
        lexemes.append((text[start] if group == _PUNCTUATION else _KINDS[group], start, end))
    spans: list[tuple[int, int]] = []
    index, found = 0, False
    try:
        while index < len(lexemes):
            kind, start, end = lexemes[index]
            if kind in ("{", "["):
                node, index = _value(text, lexemes, index)
                for call in node[3] if kind == "[" else [node]:
                    _call_spans(call, spans)
                found = True
            elif kind == "," or (kind == "o" and _DECORATION.fullmatch(text, start, end)):
                index += 1  # a comma between calls, a fence, a tag
            else:
                return None
    except (_NotCall, RecursionError):
        return None
    return spans if found else None


def _value(text: str, lexemes: list[_Lexeme], index: int) -> tuple[_Node, int]:
    """The JSON value starting at lexeme ``index`` and the index after it; _NotCall if invalid."""
    if index >= len(lexemes):
        raise _NotCall
    kind, start, end = lexemes[index]
    if kind in ("s", "n", "l"):
        return (kind, start, end, None), index + 1
    if kind not in ("{", "["):
        raise _NotCall
    closing = "}" if kind == "{" else "]"
    children: list[Any] = []
    index += 1
    if index < len(lexemes) and lexemes[index][0] == closing:  # {} or []
        return (kind, start, lexemes[index][2], children), index + 1
    while True:
        if kind == "{":
            if index + 1 >= len(lexemes) or lexemes[index][0] != "s" or lexemes[index + 1][0] != ":":
                raise _NotCall
            key_start, key_end = lexemes[index][1], lexemes[index][2]
            value, index = _value(text, lexemes, index + 2)
            children.append((text[key_start + 1 : key_end - 1], value))
        else:
            value, index = _value(text, lexemes, index)
            children.append(value)
        if index >= len(lexemes):
            raise _NotCall
        separator = lexemes[index][0]
        if separator == closing:
            return (kind, start, lexemes[index][2], children), index + 1
        if separator != ",":
            raise _NotCall
        index += 1


def _call_spans(node: _Node, spans: list[tuple[int, int]]) -> None:
    """Append the decision spans of one call object; _NotCall if ``node`` is not a call."""
    if node[0] != "{":
        raise _NotCall
    members = dict(node[3])
    name = members.get("name")
    if name is None or name[0] != "s" or not set(members) <= _CALL_KEYS:
        raise _NotCall
    _leaf_spans(name, spans)
    for key in ("arguments", "parameters"):
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
