"""Estimated time to the first token of a streamed tier, from the runs' latencies (docs/streaming.md).

The runs record each answer's latency (non-streamed, ``latency_ms``) and length
(``completion_tokens``). Per model a line ``latency = a + b * tokens`` is fitted by least squares
over its rows (``a``: the request's overhead and prompt processing; ``b``: seconds per generated
token), and a streamed stage is taken to reach its ``t``-th token at ``a + b * t``. Then, per query
of a tier's route (stage i answers unless its score is below its threshold):

* the cheap model's own first token (the cheap model streamed directly): ``a_1 + b_1``;
* ``buffer``: each stage that escalates costs its whole answer ``a_i + b_i * n_i``; the stage that
  answers is relayed after its whole answer when it is scored (a non-final stage), after its first
  token when it is the last stage (it streams live);
* ``prefix``: a scored stage decides after its prefix, ``a_i + b_i * r_i`` (``r_i`` its prefix's
  tokens, ``policies.commit.prefix_length``), whether it escalates or commits; the last stage
  streams live.

These are estimates from one machine's latencies (on a shared CPU, with two calls in flight); the
measured streams are in docs/benchmarks.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from calibration.table_io import read_columns
from policies.commit import CommitRule, prefix_length


@dataclass(frozen=True)
class Timing:
    """Per model: seconds before the first token (``a``) and per generated token (``b``)."""

    a: float
    b: float

    def at(self, tokens: np.ndarray | float) -> np.ndarray:
        """Seconds until token ``tokens`` has been generated."""
        return self.a + self.b * np.asarray(tokens, dtype=np.float64)


def fit_timing(latency_s: np.ndarray, tokens: np.ndarray) -> Timing:
    """Least-squares ``latency = a + b * tokens`` (``a``, ``b`` clipped at 0)."""
    tokens = np.asarray(tokens, dtype=np.float64)
    latency_s = np.asarray(latency_s, dtype=np.float64)
    if tokens.size < 2 or np.ptp(tokens) == 0:
        per_token = float(np.median(latency_s / np.maximum(tokens, 1.0)))
        return Timing(0.0, per_token)
    b, a = np.polyfit(tokens, latency_s, 1)
    return Timing(max(float(a), 0.0), max(float(b), 0.0))


def read_lengths(
    path: str | Path, query_ids: np.ndarray, models: tuple[str, ...], where: Mapping[str, str] | None = None
) -> tuple[np.ndarray, dict[str, Timing], np.ndarray]:
    """``(tokens (n, k), timings by model, logprobs (n, k) object)`` of the runs for the matrix's
    queries and models (the recorded ``completion_tokens``, the fitted ``Timing`` per model, and each
    answer's ``logprobs.content``, for the prefix lengths)."""
    columns = read_columns(
        Path(path), {"query_id", "model", "latency_ms", "completion_tokens", "logprobs"}, where or {}
    )
    position = {str(q): i for i, q in enumerate(query_ids)}
    column_of = {name: j for j, name in enumerate(models)}
    tokens = np.zeros((len(query_ids), len(models)))
    content = np.empty((len(query_ids), len(models)), dtype=object)
    samples: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in models}
    values = columns.values
    for row in range(len(values["query_id"])):
        query, model = str(values["query_id"][row]), str(values["model"][row])
        if model not in column_of:
            continue
        count = float(values["completion_tokens"][row] or 0)
        latency = values["latency_ms"][row]
        if latency is not None and count > 0:
            samples[model][0].append(float(latency) / 1000.0)
            samples[model][1].append(count)
        if query in position:
            tokens[position[query], column_of[model]] = count
            entries = values["logprobs"][row]
            content[position[query], column_of[model]] = entries if isinstance(entries, list) else []
    timings = {name: fit_timing(np.array(lat), np.array(cnt)) for name, (lat, cnt) in samples.items()}
    return tokens, timings, content


def prefix_tokens(content: np.ndarray, tokens: np.ndarray, rule: CommitRule | None) -> np.ndarray:
    """(n, k) tokens a stage reads before it decides: the whole answer under ``buffer``, else the
    prefix (``policies.commit.prefix_length`` of each recorded answer)."""
    if rule is None or rule.rule != "prefix" or rule.tokens is None:
        return tokens
    read = np.empty_like(tokens)
    for index in np.ndindex(tokens.shape):
        entries: list[Any] = list(content[index] or [])
        streamed = min(len(entries), int(tokens[index])) if tokens[index] else len(entries)
        read[index] = min(prefix_length(entries, rule.tokens, rule.boundary), max(streamed, 1))
    return read


def route_first_token(
    score: np.ndarray,
    thresholds: tuple[float, ...],
    read: np.ndarray,
    timings: list[Timing],
) -> tuple[np.ndarray, np.ndarray]:
    """``(seconds (n,), escalated (n,) bool)``: each query's first token through one route.

    ``score``, ``read``: ``(n, k)`` of the route's k models, in stage order; ``read`` is the tokens
    a stage generates before it decides (its whole answer under the buffered rule,
    ``prefix_tokens``). ``timings``: the k models' ``Timing``.
    """
    n, k = score.shape
    elapsed = np.zeros(n)
    active = np.ones(n, dtype=bool)
    first = np.zeros(n)
    for stage in range(k):
        timing = timings[stage]
        if stage == k - 1:  # the last stage streams live
            first = np.where(active, elapsed + timing.at(1.0), first)
            break
        decided = elapsed + timing.at(read[:, stage])
        escalate = active & (score[:, stage] < thresholds[stage])
        # A committed scored stage starts relaying when it decides (the buffered rule: its whole answer).
        first = np.where(active & ~escalate, decided, first)
        elapsed = np.where(escalate, decided, elapsed)
        active = escalate
    escalated = np.zeros(n, dtype=bool) if k == 1 else score[:, 0] < thresholds[0]
    return first, escalated
