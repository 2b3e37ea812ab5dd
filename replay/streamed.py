"""Read one streamed chat completion from the gateway: the answer, its facts and its timings.

``cascade replay --stream`` sends every question with ``stream: true`` (and
``stream_options.include_usage``), as a chat client does, and records when the first content token
arrived (``ttft_ms``) next to when the whole answer had (``latency_ms``). A streamed response's
headers leave before a live stage has ended (and before the decision itself, on a stream the
gateway started early), so the request's decision is read wherever it travelled: headers, SSE
comment lines, the last chunk's ``cascade`` object (``policies.response_decision``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from policies.response_decision import DecisionReader


class StreamFailedError(httpx.HTTPError):
    """The stream started and then ended with an error event, or without its end (a transient failure)."""


@dataclass
class StreamedAnswer:
    """A streamed answer as a client assembles it, and the reader of its decision."""

    decision: DecisionReader
    message: dict[str, Any] = field(default_factory=lambda: {"role": "assistant", "content": ""})
    usage: dict[str, Any] = field(default_factory=dict)
    ttft_ms: float | None = None
    latency_ms: float = 0.0


async def read_stream(
    client: httpx.AsyncClient, url: str, payload: dict[str, Any], headers: dict[str, str]
) -> StreamedAnswer | httpx.Response:
    """POST ``payload`` and read its stream to the end: the answer, or the (read) response of a
    request the gateway refused before streaming. Raises StreamFailedError for a stream that broke."""
    started = time.perf_counter()
    async with client.stream("POST", url, json=payload, headers=headers) as response:
        if response.status_code != 200:
            await response.aread()
            return response
        answer = StreamedAnswer(DecisionReader(response.headers))
        calls: dict[int, dict[str, Any]] = {}
        done = False
        async for line in response.aiter_lines():
            if line.startswith("event: error"):
                raise StreamFailedError("the stream ended with an error event")
            if not line.startswith("data: "):
                answer.decision.comment(line)  # a stream started early: its decision comes here
                continue
            data = line[6:].strip()
            if data == "[DONE]":
                done = True
                break
            chunk = orjson.loads(data)
            if answer.ttft_ms is None and _has_output(chunk):
                answer.ttft_ms = (time.perf_counter() - started) * 1000
            _add_chunk(answer, calls, chunk)
        if not done:
            raise StreamFailedError("the stream ended before [DONE]")
    answer.latency_ms = (time.perf_counter() - started) * 1000
    if calls:
        answer.message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return answer


def _has_output(chunk: dict[str, Any]) -> bool:
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("tool_calls"):
            return True
    return False


def _add_chunk(answer: StreamedAnswer, calls: dict[int, dict[str, Any]], chunk: dict[str, Any]) -> None:
    if isinstance(chunk.get("usage"), dict):
        answer.usage = chunk["usage"]
    answer.decision.chunk(chunk)
    for choice in chunk.get("choices") or ():
        if choice.get("index", 0) != 0:
            continue
        delta = choice.get("delta") or {}
        if isinstance(delta.get("content"), str):
            answer.message["content"] += delta["content"]
        for fragment in delta.get("tool_calls") or ():
            call = calls.setdefault(
                int(fragment.get("index", 0)),
                {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
            )
            function = fragment.get("function") or {}
            call["id"] = call["id"] or fragment.get("id")
            call["function"]["name"] = call["function"]["name"] or function.get("name") or ""
            call["function"]["arguments"] += function.get("arguments") or ""
