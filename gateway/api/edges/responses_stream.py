"""The engine's chat stream as Responses API events (``stream: true`` on ``/v1/responses``).

Every event is ``event: <type>`` + ``data: <json>`` with a ``sequence_number`` counting from 0:
``response.created`` and ``response.in_progress``; for text, ``response.output_item.added`` (a
``message``), ``response.content_part.added``, ``response.output_text.delta``...,
``response.output_text.done``, ``response.content_part.done``, ``response.output_item.done``
(``refusal`` parts likewise with ``response.refusal.*``); for each tool call,
``response.output_item.added`` (a ``function_call``), ``response.function_call_arguments.delta``...,
then at the end ``response.function_call_arguments.done`` and ``response.output_item.done``; last
``response.completed`` (``response.incomplete`` when the answer hit ``max_output_tokens``) with the
whole response, its usage and a ``cascade`` object with the request's facts (as the last chunk of a
chat stream has). A stream that fails after it started ends with an ``error`` event and
``response.failed``; an upstream's error event carries its ``upstream`` object
(docs/contracts.md#upstream-errors).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.api.edges.base import ChatStreamTranslator
from gateway.api.edges.responses_request import ResponsesRequest
from gateway.api.edges.responses_response import (
    completion_status,
    function_call_item,
    message_id,
    output_text,
    response_object,
    response_usage,
    text_logprobs,
)
from gateway.wire.errors import GatewayError
from gateway.wire.tool_call_fragments import ToolCallFragments


class ResponsesStream(ChatStreamTranslator):
    """One request's Responses event stream (see the module docstring)."""

    def __init__(self, context: ResponsesRequest):
        self.context = context
        self.sequence = 0
        self.started = False
        self.model = context.model
        self.items: list[dict[str, Any]] = []  # output items in order, open or done
        self.message: int | None = None  # position of the open message item
        self.part: dict[str, Any] | None = None  # its open content part
        self.calls: dict[int, int] = {}  # chat tool-call index -> position of its item
        self.fragments = ToolCallFragments()
        self.finish_reason: Any = None
        self.usage: Any = None
        self.cascade: Any = None

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    def _start(self) -> list[bytes]:
        if self.started:
            return []
        self.started = True
        response = response_object(self.context, status="in_progress", model=self.model, output=[])
        return [
            self._event("response.created", response=response),
            self._event("response.in_progress", response=response),
        ]

    def feed(self, chunk: dict[str, Any]) -> bytes:
        """Events for one chat chunk: text, refusal and tool-call deltas; usage and facts are kept."""
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        out = self._start()
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        if chunk.get("cascade") is not None:
            self.cascade = chunk["cascade"]
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # a Responses answer has one choice (n is 1 on this endpoint)
            found = choice.get("delta")
            delta: dict[str, Any] = found if isinstance(found, dict) else {}
            if isinstance(delta.get("content"), str) and delta["content"]:
                logprobs = text_logprobs(choice.get("logprobs")) if self.context.wants_logprobs else []
                out += self._text("output_text", delta["content"], logprobs)
            if isinstance(delta.get("refusal"), str) and delta["refusal"]:
                out += self._text("refusal", delta["refusal"], [])
            calls = delta.get("tool_calls")
            for call in calls if isinstance(calls, list) else ():
                if isinstance(call, dict):
                    out += self._tool_call(call)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return b"".join(out)

    def _text(self, kind: str, delta: str, logprobs: list[dict[str, Any]]) -> list[bytes]:
        out: list[bytes] = []
        if self.message is None:
            self.message = len(self.items)
            item: dict[str, Any] = {
                "type": "message",
                "id": message_id(self.context) + (f"_{self.message}" if self.message else ""),
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
            self.items.append(item)
            out.append(self._event("response.output_item.added", output_index=self.message, item=item))
        item = self.items[self.message]
        if self.part is None or self.part["type"] != kind:
            out += self._close_part()
            self.part = output_text("", []) if kind == "output_text" else {"type": "refusal", "refusal": ""}
            item["content"].append(self.part)
            out.append(self._event("response.content_part.added", **self._where(), part=self.part))
        if kind == "output_text":
            self.part["text"] += delta
            self.part["logprobs"].extend(logprobs)
            out.append(
                self._event("response.output_text.delta", **self._where(), delta=delta, logprobs=logprobs)
            )
        else:
            self.part["refusal"] += delta
            out.append(self._event("response.refusal.delta", **self._where(), delta=delta))
        return out

    def _where(self) -> dict[str, Any]:
        assert self.message is not None
        item = self.items[self.message]
        return {
            "item_id": item["id"],
            "output_index": self.message,
            "content_index": len(item["content"]) - 1,
        }

    def _close_part(self) -> list[bytes]:
        part = self.part
        if part is None:
            return []
        if part["type"] == "output_text":
            done = self._event(
                "response.output_text.done", **self._where(), text=part["text"], logprobs=part["logprobs"]
            )
        else:
            done = self._event("response.refusal.done", **self._where(), refusal=part["refusal"])
        self.part = None
        return [done, self._event("response.content_part.done", **self._where(), part=part)]

    def _close_message(self, status: str) -> list[bytes]:
        if self.message is None:
            return []
        out = self._close_part()
        item = self.items[self.message]
        item["status"] = status
        out.append(self._event("response.output_item.done", output_index=self.message, item=item))
        self.message = None
        return out

    def _tool_call(self, fragment: dict[str, Any]) -> list[bytes]:
        call, piece = self.fragments.add(fragment)
        out: list[bytes] = []
        position = self.calls.get(call.index)
        if position is None:
            out += self._close_message("completed")  # the text came before the calls
            position = self.calls[call.index] = len(self.items)
            number = len(self.calls) - 1
            item = function_call_item(self.context, number, call.call_id, call.name, "", "in_progress")
            self.items.append(item)
            out.append(self._event("response.output_item.added", output_index=position, item=item))
        item = self.items[position]
        item["name"] = call.name
        if piece:
            item["arguments"] = call.arguments
            out.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=position,
                    delta=piece,
                )
            )
        return out

    def finish(self) -> bytes:
        """At the chat stream's end: close every item, then ``response.completed`` (or ``.incomplete``)."""
        status, incomplete = completion_status(self.finish_reason)
        out = self._start()
        out += self._close_message(status)
        for position in sorted(self.calls.values()):
            item = self.items[position]
            item["status"] = "completed"
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=position,
                    name=item["name"],
                    arguments=item["arguments"],
                )
            )
            out.append(self._event("response.output_item.done", output_index=position, item=item))
        self.calls = {}
        response = response_object(
            self.context,
            status=status,
            model=self.model,
            output=self.items,
            usage=response_usage(self.usage),
            incomplete_details=incomplete,
        )
        if self.cascade is not None:
            response["cascade"] = self.cascade
        kind = "response.completed" if status == "completed" else "response.incomplete"
        out.append(self._event(kind, response=response))
        return b"".join(out)

    def fail(self, error: GatewayError) -> bytes:
        """An ``error`` event, then ``response.failed`` with what was streamed so far."""
        out = self._start()
        fields: dict[str, Any] = {"code": error.code, "message": error.message, "param": error.param}
        if error.upstream is not None:
            fields["upstream"] = error.upstream
        out.append(self._event("error", **fields))
        failure = {
            "code": "rate_limit_exceeded" if error.status == 429 else "server_error",
            "message": error.message,
        }
        response = response_object(
            self.context, status="failed", model=self.model, output=self.items, error=failure
        )
        out.append(self._event("response.failed", response=response))
        return b"".join(out)
