"""What a request asks for and what an answer calls: request kinds and tool calls (docs/tool-calls.md).

Shared by the gateway (live), ``cascade collect`` (recording) and calibration, so a request is of
the same kind and an answer makes the same calls on every side.

* ``request_kind(body)``: ``tool_call`` when the chat body declares tools and does not forbid
  them (``tool_choice`` other than ``none``), ``structured_output`` when it asks for JSON
  (``response_format`` of type ``json_schema`` or ``json_object``), else ``text``.
* ``answer_calls(message)``: the calls of a chat ``message``: its ``tool_calls`` when it has
  some, else the calls written as JSON in its ``content`` (``calls_in_content``), which is how
  small models behind llama.cpp's server often answer (Qwen2.5-Coder writes
  ``{"name": ..., "arguments": {...}}`` bare or inside a fenced ``json`` block, sometimes with its
  outer braces doubled, ``{{"name": ..., "arguments": {...}}}``; Hermes-style templates inside
  ``<tool_call>`` tags).
* ``normalize_message(message)``: the same message with calls written as content moved into
  ``tool_calls`` (content ``None``), as an OpenAI client expects them.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

RequestKind = Literal["text", "tool_call", "structured_output"]
REQUEST_KINDS: tuple[RequestKind, ...] = ("text", "tool_call", "structured_output")

# Calls written as content come in blocks: ``<tool_call>`` tags or fenced code blocks (found by a
# linear scan, never a regex: an answer of thousands of unclosed tags made a lazy regex quadratic).
_TAG_OPEN, _TAG_CLOSE = "<tool_call>", "</tool_call>"
_FENCE = "```"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call: its name and its arguments exactly as written (a JSON text, maybe invalid)."""

    name: str
    arguments: str

    def parsed_arguments(self) -> Any:
        """The arguments as JSON, or raises ``orjson.JSONDecodeError``."""
        return orjson.loads(self.arguments or "{}")

    def as_openai(self, call_id: str) -> dict[str, Any]:
        """The call as an OpenAI ``tool_calls`` entry."""
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


def request_kind(body: Mapping[str, Any]) -> RequestKind:
    """The kind of a chat-completions request body (see the module docstring)."""
    tools = body.get("tools")
    if isinstance(tools, list) and tools and body.get("tool_choice") != "none":
        return "tool_call"
    response_format = body.get("response_format")
    if isinstance(response_format, Mapping) and response_format.get("type") in ("json_schema", "json_object"):
        return "structured_output"
    return "text"


def answer_calls(message: Mapping[str, Any] | None, *, in_content: bool = True) -> list[ToolCall]:
    """The calls a chat message makes: ``tool_calls`` if any, else calls written in ``content``
    (unless ``in_content`` is false: then a message without ``tool_calls`` makes none)."""
    if not isinstance(message, Mapping):
        return []
    listed = message.get("tool_calls")
    if isinstance(listed, list) and listed:
        return [_listed_call(entry) for entry in listed]
    content = message.get("content")
    if not in_content or not isinstance(content, str):
        return []
    return calls_in_content(content) or []


def _listed_call(entry: Any) -> ToolCall:
    function = entry.get("function") if isinstance(entry, Mapping) else None
    if not isinstance(function, Mapping):
        return ToolCall("", "")
    arguments = function.get("arguments")
    if not isinstance(arguments, str):  # some servers send an object: keep its JSON text
        arguments = orjson.dumps(arguments).decode() if arguments is not None else ""
    name = function.get("name")
    return ToolCall(name if isinstance(name, str) else "", arguments)


def calls_in_content(content: str) -> list[ToolCall] | None:
    """Calls written as the whole of ``content``, or None when it is anything else.

    Accepted: one JSON object ``{"name": ..., "arguments": ...}`` (``parameters`` is read as
    ``arguments``), also with its outer braces doubled (``{{...}}``, as the local Qwen2.5-Coder
    models were seen to write it), a JSON list of them, several of them one after another, or any
    of these inside fenced code blocks or ``<tool_call>`` tags. Text outside them means the answer
    is text: None. Time is linear in the content, and JSON nested deeper than the parsers go is no
    call.
    """
    text = content.strip()
    if not text:
        return None
    for blocks in (_blocks(text, _TAG_OPEN, _TAG_CLOSE), _blocks(text, _FENCE, _FENCE, fence=True)):
        if blocks:
            found = [_calls_in_json(block) for block in blocks]
            return (
                None
                if any(calls is None for calls in found)
                else [c for calls in found if calls for c in calls]
            )
    return _calls_in_json(text)


def _blocks(text: str, opening: str, closing: str, *, fence: bool = False) -> list[str] | None:
    """The bodies of the ``opening``...``closing`` blocks ``text`` is made of (whitespace between
    them), or None when anything else is in it: an unclosed block, text outside the blocks.

    One pass: each search starts where the last block ended, and an unclosed block ends the scan.
    """
    bodies: list[str] = []
    position = 0
    while True:
        start = text.find(opening, position)
        if start < 0:
            break
        if start > position and not text[position:start].isspace():
            return None
        body = start + len(opening)
        if fence:  # a fence may name its language and end its line: ```json\n
            if text.startswith(("json", "JSON"), body):
                body += 4
            while body < len(text) and text[body] in " \t":
                body += 1
            if text.startswith("\n", body):
                body += 1
        end = text.find(closing, body)
        if end < 0:
            return None
        bodies.append(text[body:end].strip())
        position = end + len(closing)
    if position < len(text) and not text[position:].isspace():
        return None
    return bodies or None


def _calls_in_json(text: str) -> list[ToolCall] | None:
    """Calls in a JSON text: one object, a list, or objects one after another (else None); a text
    that is none of these but one object with doubled outer braces is read without them."""
    text = text.strip()
    values = _json_values(text)
    if not values and text.startswith("{{") and text.endswith("}}"):
        values = _json_values(text[1:-1])  # one pair stripped, once: no recursion, still linear
    if not values:
        return None
    objects = [item for value in values for item in (value if isinstance(value, list) else [value])]
    calls = [call for call in map(_written_call, objects) if call is not None]
    return calls if calls and len(calls) == len(objects) else None


def _json_values(text: str) -> list[Any] | None:
    """Every JSON value in ``text`` written one after another (whitespace between), or None."""
    try:
        return [orjson.loads(text)]
    except orjson.JSONDecodeError:
        pass
    decoder = json.JSONDecoder()
    values, position = [], 0
    while position < len(text):
        try:
            value, end = decoder.raw_decode(text, position)
        except (json.JSONDecodeError, RecursionError):  # nested past Python's stack: no call
            return None
        values.append(value)
        position = end
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
    return values


def _written_call(value: Any) -> ToolCall | None:
    if not isinstance(value, Mapping) or not isinstance(value.get("name"), str):
        return None
    if not set(value) <= {"name", "arguments", "parameters"}:
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    try:
        text = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
    except orjson.JSONEncodeError:  # nested deeper than orjson writes (255): no call to pass on
        return None
    return ToolCall(value["name"], text)


def normalize_message(message: dict[str, Any]) -> bool:
    """Move calls written as ``content`` into ``tool_calls`` (in place); True if it did.

    A message that already has ``tool_calls``, or whose content is not wholly calls, is left as it is.
    """
    if message.get("tool_calls") or not isinstance(message.get("content"), str):
        return False
    calls = calls_in_content(message["content"])
    if not calls:
        return False
    message["content"] = None
    # Ids unique across a conversation: agents match each tool result to its call by id.
    message["tool_calls"] = [call.as_openai(f"call_{secrets.token_hex(12)}") for call in calls]
    return True
