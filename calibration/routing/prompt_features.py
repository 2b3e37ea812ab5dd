"""Router features of a runs table's queries, computed from their prompt set.

A runs table records answers, not prompts; the prompt set the runs were collected from (JSONL,
``collection.prompts``: ``prompt``/``system`` or ``messages``, optional ``tools``) gives each
query's request. Its features are computed exactly as the gateway computes a live request's
(``policies.route_features``), so a router fitted here reads the same numbers when served.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from policies.route_features import CHEAP, FEATURE_SETS, MINILM, cheap_features, request_parts
from policies.tool_calls import request_kind


@dataclass(frozen=True)
class PromptFeatures:
    """Per-query feature rows and the CPU seconds each took to compute (``seconds`` (n,))."""

    features: np.ndarray
    seconds: np.ndarray


def prompt_request(row: Mapping[str, Any]) -> dict[str, Any]:
    """The chat request body a prompt-set row sends (messages, and its tools when it has some)."""
    messages = row.get("messages")
    if not isinstance(messages, list):
        messages = [{"role": "system", "content": row["system"]}] if row.get("system") else []
        messages = [*messages, {"role": "user", "content": str(row.get("prompt", ""))}]
    body: dict[str, Any] = {"messages": messages}
    for name in ("tools", "tool_choice", "response_format"):
        if row.get(name) is not None:
            body[name] = row[name]
    return body


def read_prompt_requests(paths: Sequence[Path]) -> dict[str, dict[str, Any]]:
    """``{query_id: request body}`` of every row of the prompt sets ``paths``."""
    requests: dict[str, dict[str, Any]] = {}
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                requests[str(row["query_id"])] = prompt_request(row)
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{number}: not a prompt-set row ({exc})") from None
    return requests


def request_features(body: Mapping[str, Any], feature_set: str, encoder: Any = None) -> np.ndarray:
    """One request's vector of ``feature_set`` (``encoder``: a ``MiniLMEncoder`` for ``minilm-v1``)."""
    text, n_tools, kind = request_parts(body, request_kind(body))
    if feature_set == CHEAP:
        return cheap_features(text, n_tools, kind)
    if feature_set == MINILM:
        return np.asarray(encoder.encode(text), dtype=np.float64)
    raise ValueError(f"unknown feature set {feature_set!r}; known: {', '.join(FEATURE_SETS)}")


def features_for_queries(
    query_ids: Sequence[str], requests: Mapping[str, Mapping[str, Any]], feature_set: str
) -> PromptFeatures:
    """Feature rows for ``query_ids`` (each must have a prompt), timed per query in CPU seconds."""
    missing = [q for q in query_ids if q not in requests]
    if missing:
        raise ValueError(f"{len(missing)} queries have no prompt in the prompt set(s), e.g. {missing[0]!r}")
    encoder = None
    if feature_set == MINILM:
        from traffic.judges.similarity import load_encoder

        encoder = load_encoder()
    rows, seconds = [], []
    for query in query_ids:
        started = time.process_time()
        rows.append(request_features(requests[query], feature_set, encoder))
        seconds.append(time.process_time() - started)
    return PromptFeatures(np.vstack(rows), np.asarray(seconds))
