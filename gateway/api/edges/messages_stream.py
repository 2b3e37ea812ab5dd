"""Chat-completions stream chunks -> Anthropic Messages SSE events (docs/apis.md#v1messages).

Anthropic's stream is ``message_start`` (the message with empty content and its usage so far),
``ping``, then per content block ``content_block_start``, ``content_block_delta``s (``text_delta``
for text, ``input_json_delta`` for a ``tool_use`` block's input) and ``content_block_stop``, then
``message_delta`` (``stop_reason``, ``stop_sequence`` and the final usage) and ``message_stop``.
Every event has an ``event:`` line naming its type (the anthropic SDK skips data without one). A
failure after the stream started is an ``error`` event with the Anthropic error body.

``MessagesStream`` translates a chat stream chunk by chunk: text deltas and tool-call fragments
are relayed as they arrive (a tool call's block opens once its name is known), so a client sees
tokens as the upstream produces them; a complete answer (an accepted cheap stage, which the engine
replays as chat chunks) takes the same path. A stream's input tokens are only known at its end:
``message_start`` carries 0 and ``message_delta`` the upstream's count (the SDK takes the latter).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.api.edges.base import ChatStreamTranslator
from gateway.api.edges.messages_response import error_body, message_id, stop_reason, tool_use_id, usage
from gateway.wire.errors import GatewayError, UpstreamError
from gateway.wire.tool_call_fragments import ToolCallFragments

PING = b'event: ping\ndata: {"type":"ping"}\n\n'


def event(data: dict[str, Any]) -> bytes:
    """One SSE event named by its ``type``."""
    return b"event: " + data["type"].encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def error_event(error: GatewayError, request_id: str | None = None) -> bytes:
    """The ``error`` event that ends a failed stream."""
    return event(dict(error_body(error, request_id)))


def _start(message: dict[str, Any]) -> bytes:
    return event({"type": "message_start", "message": message}) + PING


def _end(
    reason: str, sequence: str | None, final_usage: dict[str, int], cascade: dict[str, Any] | None
) -> bytes:
    delta: dict[str, Any] = {
        "type": "message_delta",
        "delta": {"stop_reason": reason, "stop_sequence": sequence},
        "usage": final_usage,
    }
    if cascade is not None:
        delta["cascade"] = cascade  # the gateway's decision facts, as on the chat stream's last chunk
    return event(delta) + event({"type": "message_stop"})


class MessagesStream:
    """Translates one live chat stream (its chunk objects) into Anthropic events, in order."""

    def __init__(self, stop_sequences: tuple[str, ...] = ()):
        self._stop_sequences = stop_sequences
        self._blocks = 0  # content blocks opened so far
        self._open: int | None = None  # the block receiving deltas
        self._text_open = False
        self._calls = ToolCallFragments()
        self._call_blocks: dict[int, int] = {}  # tool-call index -> its block, once opened
        self._finish: Any = None
        self._matched: Any = None
        self._usage: dict[str, Any] | None = None
        self._output_chunks = 0

    def start(self, model: str, input_tokens: int = 0) -> bytes:
        """``message_start`` (the message answered by ``model``, no content yet) and a ``ping``."""
        message: dict[str, Any] = {
            "id": message_id(),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage({"prompt_tokens": input_tokens}), "output_tokens": 0},
        }
        return _start(message)

    def chunk(self, chunk: dict[str, Any]) -> bytes:
        """The events of one chat chunk (often one ``content_block_delta``; may be none).

        Raises UpstreamError when the chunk continues a tool call whose block is already closed
        (Anthropic blocks are sequential; no known server interleaves tool calls).
        """
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        out: list[bytes] = []
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # one answer per request (n > 1 is refused on /v1/messages routes)
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                self._output_chunks += 1
                if not self._text_open:
                    out.append(self._open_block({"type": "text", "text": ""}))
                    self._text_open = True
                out.append(self._delta({"type": "text_delta", "text": text}))
            fragments = delta.get("tool_calls")
            if isinstance(fragments, list) and fragments:
                self._output_chunks += 1
                for fragment in fragments:
                    if isinstance(fragment, dict):
                        out.extend(self._tool_fragment(fragment))
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
                self._matched = choice.get("stop_reason")
        return b"".join(out)

    def finish(self, cascade: dict[str, Any] | None = None) -> bytes:
        """Close the open block; ``message_delta`` (stop reason, usage) and ``message_stop``."""
        for call in self._calls:
            if call.index not in self._call_blocks:
                raise UpstreamError("the upstream streamed a tool call without a name")
        out = [self._close()]
        reason, sequence = stop_reason(self._finish, bool(self._calls), self._matched, self._stop_sequences)
        final = usage(self._usage)
        # Without the upstream's count, one token per chunk that carried output (how servers stream).
        final["output_tokens"] = max(final["output_tokens"], self._output_chunks)
        if self._usage is None or "prompt_tokens" not in self._usage:
            del final["input_tokens"]  # unknown: the SDK keeps message_start's value
        out.append(_end(reason, sequence, final, cascade))
        return b"".join(out)

    def _tool_fragment(self, fragment: dict[str, Any]) -> list[bytes]:
        call, piece = self._calls.add(fragment)
        block = self._call_blocks.get(call.index)
        out: list[bytes] = []
        if block is None:
            if not call.name:
                return out  # its block opens once the name is known
            opened = {"type": "tool_use", "id": tool_use_id(call.call_id), "name": call.name, "input": {}}
            out.append(self._open_block(opened))
            assert self._open is not None
            self._call_blocks[call.index] = self._open
            piece = call.arguments  # what came before the name, and this fragment's
        elif block != self._open:
            raise UpstreamError("the upstream interleaved the fragments of two tool calls")
        if piece:
            out.append(self._delta({"type": "input_json_delta", "partial_json": piece}))
        return out

    def _open_block(self, block: dict[str, Any]) -> bytes:
        closed = self._close()
        self._open = self._blocks
        self._blocks += 1
        return closed + event({"type": "content_block_start", "index": self._open, "content_block": block})

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        index, self._open, self._text_open = self._open, None, False
        return event({"type": "content_block_stop", "index": index})

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return event({"type": "content_block_delta", "index": self._open, "delta": delta})


class MessagesStreamTranslator(ChatStreamTranslator):
    """The engine's chat stream as Anthropic events: ``message_start`` at the first chunk (its
    ``model`` is the configured model answering), the ``cascade`` facts of the last chunk on
    ``message_delta``, the closing events at ``[DONE]``."""

    def __init__(self, stop_sequences: tuple[str, ...]):
        self._stream = MessagesStream(stop_sequences)
        self._started = False
        self._cascade: dict[str, Any] | None = None

    def feed(self, chunk: dict[str, Any]) -> bytes:
        """The events of one chat chunk (``message_start`` and ``ping`` before the first)."""
        head = b""
        if not self._started:
            self._started = True
            head = self._stream.start(str(chunk.get("model") or ""))
        cascade = chunk.get("cascade")
        if isinstance(cascade, dict):
            self._cascade = cascade
        return head + self._stream.chunk(chunk)

    def finish(self) -> bytes:
        """``content_block_stop``, ``message_delta`` (stop reason, usage, facts) and ``message_stop``."""
        return self._stream.finish(self._cascade)

    def fail(self, error: GatewayError) -> bytes:
        """The ``error`` event that ends the stream."""
        return error_event(error)
