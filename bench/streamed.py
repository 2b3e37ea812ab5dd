"""One streamed chat request, timed as a person watching it: the benches' shared measurement.

``timed_stream`` sends a streamed ``/v1/chat/completions`` request and reads it to ``[DONE]``:
seconds to the first chunk with non-empty ``delta.content`` and to the end, the content chunks,
the response headers (the gateway's ``x-cascade-*`` decision; a stream the gateway started early,
``limits.stream_start_after_s``, carries it as SSE comment lines before its first event, read
here as headers) and the gateway's ``cascade`` object of the last chunk. Used by
bench/routed_ttft.py and bench/local/prefix_ttft.py.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass(frozen=True)
class TimedStream:
    """What one streamed request took (see the module docstring)."""

    ttft_s: float
    whole_s: float
    chunks: int
    headers: dict[str, str]
    facts: dict[str, Any] = field(default_factory=dict)


def timed_stream(client: httpx.Client, url: str, body: dict[str, Any]) -> TimedStream:
    """Stream ``body`` to ``url`` and time it; RuntimeError when no content arrived."""
    started = time.perf_counter()
    first: float | None = None
    chunks = 0
    facts: dict[str, Any] = {}
    with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        headers = {k.lower(): v for k, v in response.headers.items()}
        for line in response.iter_lines():
            if line.startswith(": x-cascade-"):  # a stream started early: its decision comes here
                name, _, value = line[2:].partition(":")
                headers[name.strip().lower()] = value.strip()
                continue
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            facts = chunk.get("cascade") or facts
            for choice in chunk.get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    chunks += 1
                    if first is None:
                        first = time.perf_counter() - started
    if first is None:
        raise RuntimeError(f"no content streamed from {url}")
    return TimedStream(first, time.perf_counter() - started, chunks, headers, facts)
