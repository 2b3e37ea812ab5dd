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


async def upstream_events(
    response: aiohttp.ClientResponse,
    model: str,
    redact: Redactor = _NO_SECRETS,
    first_chunk: Callable[[], None] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """Parsed ``data:`` objects of a live upstream stream, until ``[DONE]``; ``first_chunk`` (None
    unless the console is on) is called once, at the first (as the traced attempt's span is).

    Raises UpstreamFailure if an event is not JSON, its ``choices`` are not a list of objects, the
    stream stops before ``[DONE]`` without any ``finish_reason`` (a truncated stream is never passed
    off as a complete answer), or it outlasts its timeout (kind ``timeout``); an error event is
    the provider's failure in its own words (``error_event_failure``, its text through ``redact``).
    """
    finished = False
    traced = STREAM_ATTEMPT.get()  # the attempt's span, when the request is traced
    # What sees each chunk (None: neither tracing nor the console): one check a chunk either way.
    observe: Callable[[dict[str, Any]], None] | None = None if traced is None else traced.chunk
    if first_chunk is not None:
        observe = _noting_first(observe, first_chunk)
    try:
        async for raw_line in response.content:
            line = raw_line.strip()
            if not line.startswith(b"data:"):
                continue  # blank separators, comments, ``event:`` lines
            payload = line[5:].strip()
            if payload == b"[DONE]":
                return
            try:
                event = orjson.loads(payload)
            except orjson.JSONDecodeError:
                raise UpstreamFailure(model, "malformed", "stream event is not JSON") from None
            if not isinstance(event, dict):
                raise UpstreamFailure(model, "malformed", "stream event is not a JSON object")
            if event.get("error"):
                raise error_event_failure(model, event, redact)
            choices = event.get("choices", [])
            if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
                raise UpstreamFailure(model, "malformed", "stream event choices are not a list of objects")
            for choice in choices:
                if choice.get("finish_reason"):
                    finished = True
            if observe is not None:
                observe(event)
            yield event
    except TimeoutError:
        # The request deadline (the stream's total timeout) or the per-read timeout passed.
        raise UpstreamFailure(model, "timeout", "stream outlasted the request deadline") from None
    except aiohttp.http_exceptions.LineTooLong:
        # aiohttp reads at most 512 KiB per line: a longer event cannot be read (and is no 500).
        raise UpstreamFailure(model, "malformed", "a stream event is longer than can be read") from None
    except (aiohttp.ClientError, aiohttp.http_exceptions.HttpProcessingError, ValueError) as exc:
        raise UpstreamFailure(model, "connect", f"stream broke ({type(exc).__name__})") from None
    if not finished:
        raise UpstreamFailure(model, "malformed", "stream ended before [DONE]")


def _noting_first(
    observe: Callable[[dict[str, Any]], None] | None, first_chunk: Callable[[], None]
) -> Callable[[dict[str, Any]], None]:
    """``observe`` (if any) of each chunk, and ``first_chunk`` once, at the first."""
    pending = [first_chunk]

    def noting(event: dict[str, Any]) -> None:
        if observe is not None:
            observe(event)
        if pending:
            pending.pop()()

    return noting


def client_chunk(event: dict[str, Any], model_name: str, request: ParsedRequest) -> dict[str, Any]:
    """Make an upstream chunk the client's: configured model name, logprobs only if asked."""
    event["model"] = model_name
    if not request.wants_logprobs:
        for choice in event.get("choices") or ():
            if isinstance(choice, dict) and choice.get("logprobs") is not None:
                choice["logprobs"] = None
    return event
