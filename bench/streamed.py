"""One streamed chat request, timed as a person watching it: the benches' shared measurement.

``timed_stream`` sends a streamed ``/v1/chat/completions`` request and reads it to ``[DONE]``:
seconds to the first chunk with non-empty ``delta.content`` and to the end, the content chunks,
and the gateway's decision wherever it travelled (headers, the SSE comment lines of a stream the
gateway started early, the last chunk's ``cascade`` object: ``policies.response_decision``; a
direct call to a model server carries none). Used by bench/routed_ttft.py and
bench/local/prefix_ttft.py.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from policies.response_decision import DecisionReader, ResponseDecision


@dataclass(frozen=True)
class TimedStream:
    """What one streamed request took (see the module docstring)."""

    ttft_s: float
    whole_s: float
    chunks: int
    decision: ResponseDecision


def timed_stream(client: httpx.Client, url: str, body: dict[str, Any]) -> TimedStream:
    """Stream ``body`` to ``url`` and time it; RuntimeError when no content arrived."""
    started = time.perf_counter()
    first: float | None = None
    chunks = 0
    with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        reader = DecisionReader(response.headers)
        for line in response.iter_lines():
            if not line.startswith("data:"):
                reader.comment(line)  # a stream started early: its decision comes here
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            reader.chunk(chunk)
            for choice in chunk.get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    chunks += 1
                    if first is None:
                        first = time.perf_counter() - started
    if first is None:
        raise RuntimeError(f"no content streamed from {url}")
    return TimedStream(first, time.perf_counter() - started, chunks, reader.decision())
