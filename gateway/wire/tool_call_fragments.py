"""Streamed tool calls joined from their fragments, as OpenAI clients join them.

A chat stream sends each tool call in pieces (``delta.tool_calls[]``), keyed by the call's
``index``: the call's ``id`` and function ``name`` in (usually) the first piece, its ``arguments``
JSON text spread over many. The answer check (gateway.stages.answer_review) and both translated streams
(gateway.api.edges.messages_stream, gateway.api.edges.responses_stream) read calls this one way: the id and
the name are the first non-empty strings sent for that index, the arguments every string piece
in order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TypedDict


class ChatFunction(TypedDict):
    """A chat tool call's ``function``: the name called and its arguments as JSON text."""

    name: str
    arguments: str


class ChatToolCall(TypedDict):
    """A tool call of a chat ``message.tool_calls`` (``id`` None when the upstream sent none)."""

    id: str | None
    type: str
    function: ChatFunction


@dataclass(slots=True)
class StreamedCall:
    """One tool call as its fragments have built it so far."""

    index: int
    call_id: str | None = None
    name: str = ""
    arguments: str = ""

    def as_chat(self) -> ChatToolCall:
        """The call as a complete chat ``tool_calls`` entry."""
        return {
            "id": self.call_id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


class ToolCallFragments:
    """The tool calls of one streamed choice, joined fragment by fragment."""

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: dict[int, StreamedCall] = {}

    def add(self, fragment: Mapping[str, object]) -> tuple[StreamedCall, str]:
        """Add one ``delta.tool_calls[]`` entry: (its call so far, the argument text it added)."""
        index = fragment.get("index", 0)
        key = index if isinstance(index, int) and not isinstance(index, bool) else 0
        call = self._calls.get(key)
        if call is None:
            call = self._calls[key] = StreamedCall(key)
        call_id = fragment.get("id")
        if call.call_id is None and isinstance(call_id, str) and call_id:
            call.call_id = call_id
        function = fragment.get("function")
        if not isinstance(function, Mapping):
            return call, ""
        name = function.get("name")
        if not call.name and isinstance(name, str):
            call.name = name
        piece = function.get("arguments")
        if not isinstance(piece, str):
            return call, ""
        call.arguments += piece
        return call, piece

    def __bool__(self) -> bool:
        return bool(self._calls)

    def __iter__(self) -> Iterator[StreamedCall]:
        """The calls in index order."""
        return iter([self._calls[key] for key in sorted(self._calls)])

    def as_chat(self) -> list[ChatToolCall]:
        """Every call as a chat ``tool_calls`` entry, in index order."""
        return [call.as_chat() for call in self]
