"""Server-sent events: replay a complete answer as chunks, relay a live upstream stream.

A cascade's cheap stage is called without streaming (its whole answer is scored), so an accepted
answer is *replayed* as OpenAI chunks; an escalated request streams the final model *live*. Either
way the last chunk carries a ``cascade`` object with the facts the headers could not know yet, and
the stream ends with ``data: [DONE]``. An error inside a stream is an SSE ``error`` event whose data
is the OpenAI error body (the OpenAI SDK raises it as ``APIError``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import aiohttp.http_exceptions
import orjson

from gateway.telemetry.trace_context import STREAM_ATTEMPT
from gateway.upstream.failure import UpstreamFailure, error_event_failure
from gateway.wire.requests import ParsedRequest
from redaction import Redactor

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
DONE = b"data: [DONE]\n\n"


def sse(data: dict[str, Any]) -> bytes:
    """One ``data:`` event."""
    return b"data: " + orjson.dumps(data) + b"\n\n"


def replay(body: dict[str, Any], request: ParsedRequest, cascade: dict[str, Any]) -> bytes:
    """A complete (already client-shaped) answer as the SSE bytes of an equivalent stream."""
    base = {
        "id": body.get("id") or "cmpl-cascade",
        "object": "chat.completion.chunk" if request.api == "chat" else "text_completion",
        "created": body.get("created") or 0,
        "model": body.get("model"),
    }
    if body.get("system_fingerprint"):
        base["system_fingerprint"] = body["system_fingerprint"]
    choices = [c for c in body.get("choices") or () if isinstance(c, dict)]
    events: list[dict[str, Any]] = []
    if request.api == "chat":
        events.append({**base, "choices": [_chat_role(c) for c in choices]})
        events.append({**base, "choices": [_chat_content(c) for c in choices]})
        final_choices = [
            {
                "index": c.get("index", i),
                "delta": {},
                "logprobs": None,
                "finish_reason": c.get("finish_reason"),
            }
            for i, c in enumerate(choices)
        ]
    else:
        events.append(
            {
                **base,
                "choices": [
                    {
                        "index": c.get("index", i),
                        "text": c.get("text") or "",
                        "logprobs": c.get("logprobs"),
                        "finish_reason": None,
                    }
                    for i, c in enumerate(choices)
                ],
            }
        )
        final_choices = [
            {
                "index": c.get("index", i),
                "text": "",
                "logprobs": None,
                "finish_reason": c.get("finish_reason"),
            }
            for i, c in enumerate(choices)
        ]
    events.append({**base, "choices": final_choices})
    if request.include_usage and body.get("usage") is not None:
        events.append({**base, "choices": [], "usage": body["usage"]})
    events[-1]["cascade"] = cascade
    return b"".join(sse(e) for e in events) + DONE


def _chat_role(choice: dict[str, Any]) -> dict[str, Any]:
    message = choice.get("message") or {}
    return {
        "index": choice.get("index", 0),
        "delta": {"role": message.get("role") or "assistant", "content": ""},
        "logprobs": None,
        "finish_reason": None,
    }


def _chat_content(choice: dict[str, Any]) -> dict[str, Any]:
    message = choice.get("message") or {}
    delta: dict[str, Any] = {"content": message.get("content")}
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, list) and tool_calls:
        delta["tool_calls"] = [
            {**call, "index": i} for i, call in enumerate(tool_calls) if isinstance(call, dict)
        ]
    if message.get("refusal"):
        delta["refusal"] = message["refusal"]
    return {
        "index": choice.get("index", 0),
        "delta": delta,
        "logprobs": choice.get("logprobs"),
        "finish_reason": None,
    }


# Without the pool's redaction (tests): credentials and URL passwords are still masked.
_NO_SECRETS = Redactor()


# The longest SSE line read (aiohttp's own line limit: twice its 256 KiB read buffer).
MAX_LINE_BYTES = 512 * 1024


def upstream_batches(
    response: aiohttp.ClientResponse, lines: SseLines, first_chunk: Callable[[], None] | None = None
) -> UpstreamBatches:
    """Parsed ``data:`` objects of a live upstream stream, until ``[DONE]``, a list per network
    read: the events that arrived together (never waiting for more to fill a list; a read that
    completes no event yields nothing). ``lines`` parses them (its ``done``: the list just yielded
    is the last, ``[DONE]`` came with it).

    Raises UpstreamFailure if an event is not JSON, its ``choices`` are not a list of objects, a
    line is longer than ``MAX_LINE_BYTES``, the stream stops before ``[DONE]`` without any
    ``finish_reason`` (a truncated stream is never passed off as a complete answer), or it outlasts
    its timeout (kind ``timeout``); an error event is the provider's failure in its own words
    (``error_event_failure``, its text through ``redact``). ``first_chunk`` (None unless the
    console is on) is called once, at the first event (as the traced attempt's span is shown it).
    """
    return UpstreamBatches(response, lines, first_chunk)


class UpstreamBatches:
    """The async iterator of ``upstream_batches``: an object, not an async generator, so a stream
    costs no generator registered with the event loop and nothing to finalize when it is left."""

    __slots__ = ("_ended", "_lines", "_observe", "_read")

    def __init__(
        self,
        response: aiohttp.ClientResponse,
        lines: SseLines,
        first_chunk: Callable[[], None] | None = None,
    ):
        self._read = response.content.readany  # b"": the end of the body
        self._lines = lines
        self._ended = False
        # What sees each event (None: neither tracing nor the console): one check a read either way.
        traced = STREAM_ATTEMPT.get()  # the attempt's span, when the request is traced
        observe: Callable[[dict[str, Any]], None] | None = None if traced is None else traced.chunk
        if first_chunk is not None:
            observe = _noting_first(observe, first_chunk)
        self._observe = observe

    def __aiter__(self) -> UpstreamBatches:
        return self

    async def __anext__(self) -> list[dict[str, Any]]:
        lines = self._lines
        while True:
            if lines.failure is not None:  # after the events read before it
                raise lines.failure
            if lines.done:
                raise StopAsyncIteration
            if self._ended:
                if not lines.finished:
                    raise UpstreamFailure(lines.model, "malformed", "stream ended before [DONE]")
                raise StopAsyncIteration
            try:
                data = await self._read()
            except TimeoutError:
                # The request deadline (the stream's total timeout) or the per-read timeout passed.
                raise UpstreamFailure(
                    lines.model, "timeout", "stream outlasted the request deadline"
                ) from None
            except (aiohttp.ClientError, aiohttp.http_exceptions.HttpProcessingError, ValueError) as exc:
                raise UpstreamFailure(
                    lines.model, "connect", f"stream broke ({type(exc).__name__})"
                ) from None
            if not data:
                self._ended = True
            # A last line without its newline is read as a line reader returns it.
            batch = lines.feed(data) if data else lines.end()
            if batch:
                if self._observe is not None:
                    for event in batch:
                        self._observe(event)
                return batch


async def upstream_events(
    response: aiohttp.ClientResponse,
    model: str,
    redact: Redactor = _NO_SECRETS,
    first_chunk: Callable[[], None] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """The events of ``upstream_batches`` one by one (same failures, same ``first_chunk``)."""
    async for batch in upstream_batches(response, SseLines(model, redact), first_chunk):
        for event in batch:
            yield event


def _noting_first(
    observe: Callable[[dict[str, Any]], None] | None, first_chunk: Callable[[], None]
) -> Callable[[dict[str, Any]], None]:
    """``observe`` (if any) of each event, and ``first_chunk`` once, at the first."""
    pending = [first_chunk]

    def noting(event: dict[str, Any]) -> None:
        if observe is not None:
            observe(event)
        if pending:
            pending.pop()()

    return noting


class SseLines:
    """Splits a stream's bytes into lines and parses its ``data:`` events (``upstream_batches``).

    A read's events up to a bad one are returned, the bad one's failure kept in ``failure``: what
    the upstream sent before it is relayed and counted as it would be read line by line."""

    __slots__ = ("_pending", "_redact", "done", "failure", "finished", "model")

    def __init__(self, model: str, redact: Redactor = _NO_SECRETS):
        self.model = model
        self._redact = redact
        self._pending = b""  # the start of a line whose newline has not arrived yet
        self.done = False  # ``[DONE]`` was read
        self.finished = False  # a choice carried a ``finish_reason``
        self.failure: UpstreamFailure | None = None

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """The events completed by ``data`` (up to ``[DONE]`` or a failure)."""
        lines = (self._pending + data if self._pending else data).split(b"\n")
        self._pending = lines.pop()
        events = self._events(lines)
        if len(self._pending) >= MAX_LINE_BYTES and self.failure is None and not self.done:
            self.failure = self._too_long()
        return events

    def end(self) -> list[dict[str, Any]]:
        """The event of a last line the stream ended without a newline after."""
        pending, self._pending = self._pending, b""
        return self._events([pending]) if pending else []

    def _too_long(self) -> UpstreamFailure:
        # A longer line cannot be read (and is no 500).
        return UpstreamFailure(self.model, "malformed", "a stream event is longer than can be read")

    def _events(self, lines: list[bytes]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        try:
            for line in lines:
                if not line:
                    continue  # the blank line after each event
                if len(line) >= MAX_LINE_BYTES:
                    raise self._too_long()
                if not line.startswith(b"data:"):
                    line = line.strip()
                    if not line.startswith(b"data:"):
                        continue  # blank separators, comments, ``event:`` lines
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    self.done = True
                    break
                events.append(self._event(payload))
        except UpstreamFailure as failure:
            self.failure = failure
        return events

    def _event(self, payload: bytes) -> dict[str, Any]:
        model = self.model
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise UpstreamFailure(model, "malformed", "stream event is not JSON") from None
        if type(event) is not dict:
            raise UpstreamFailure(model, "malformed", "stream event is not a JSON object")
        if event.get("error"):
            raise error_event_failure(model, event, self._redact)
        choices = event.get("choices", [])
        if type(choices) is not list:
            raise UpstreamFailure(model, "malformed", "stream event choices are not a list of objects")
        for choice in choices:
            if type(choice) is not dict:
                raise UpstreamFailure(model, "malformed", "stream event choices are not a list of objects")
            if choice.get("finish_reason"):
                self.finished = True
        return event
