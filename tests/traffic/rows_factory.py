"""Traffic rows for tests: a query answered by every model of a small pool."""

from __future__ import annotations

import math
import zlib
from datetime import UTC, datetime, timedelta
from typing import Any

from traffic.rows import TrafficRow

MODELS = ("small", "large")


def logprobs(confidence: float) -> list[dict[str, Any]]:
    """A one-token ``logprobs.content`` whose chosen token has probability ``confidence``."""
    rest = (1 - confidence) / 2
    return [
        {
            "token": "A",
            "logprob": math.log(confidence),
            "top_logprobs": [
                {"token": "A", "logprob": math.log(confidence)},
                {"token": "B", "logprob": math.log(rest)},
                {"token": "C", "logprob": math.log(rest)},
            ],
        }
    ]


def query_rows(
    query_id: str,
    *,
    correct: dict[str, float | None] | None = None,
    when: datetime | None = None,
    models: tuple[str, ...] = MODELS,
    **common: object,
) -> list[TrafficRow]:
    """One row per model for ``query_id``; ``correct`` per model (default 1.0), cost grows by model."""
    when = when or datetime.now(UTC)
    rows = []
    for index, model in enumerate(models):
        fields: dict[str, Any] = {
            "query_id": query_id,
            "model": model,
            "correct": (correct or {}).get(model, 1.0),
            "prompt_tokens": 10 + index,
            "completion_tokens": 3,
            "cost_usd": 0.001 * (index + 1),
            "logprobs": logprobs(0.5 + 0.1 * (zlib.crc32(f"{query_id}/{model}".encode()) % 5)),
            "latency_ms": 12.5 * (index + 1),
            "timestamp": when + timedelta(microseconds=index),
            "tier": "balanced",
            "policy_id": "0123456789abcdef",
            "replica": "r1",
            "judge": "exact" if model != "large" else "reference",
        }
        rows.append(TrafficRow(**{**fields, **common}))
    return rows
