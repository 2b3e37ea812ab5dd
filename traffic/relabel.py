"""Label a runs table's recorded answers by a judge, as if they were sampled traffic.

Reads a JSONL runs table with a ``response`` column (``cascade collect`` writes one), labels each
model's response against the reference model's response to the same query, and returns traffic
rows: the table's ground truth (``correct``) is replaced by the judge's label (its ``kind`` column,
missing = ``text``, is kept). This is how
label-free calibration is tried on data whose true labels are known: calibrate the exported rows,
evaluate the policy against the true labels.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from policies.tool_calls import REQUEST_KINDS
from traffic.judges.base import Judge, JudgeError, Verdict, label_answers
from traffic.rows import DEFAULT_KIND, TrafficRow


class RelabelError(Exception):
    """The runs table cannot be relabelled (one-line message)."""


def read_queries(path: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """query_id -> model -> record, from a .jsonl / .jsonl.gz runs table."""
    if not path.name.endswith((".jsonl", ".jsonl.gz", ".ndjson")):
        raise RelabelError(f"{path}: relabelling reads JSONL runs tables (.jsonl, .jsonl.gz)")
    opener = gzip.open if path.name.endswith(".gz") else open
    queries: dict[str, dict[str, dict[str, Any]]] = {}
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    record = _record(path, number, line)
                    queries.setdefault(str(record["query_id"]), {})[str(record["model"])] = record
    except OSError as exc:
        raise RelabelError(f"{path}: {exc.strerror or exc}") from exc
    return queries


def _record(path: Path, number: int, line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
        if "query_id" not in record or "model" not in record:
            raise KeyError("query_id" if "query_id" not in record else "model")
    except (ValueError, KeyError, TypeError) as exc:
        raise RelabelError(f"{path}: line {number}: not a runs row ({exc})") from None
    kind = record.get("kind")
    if kind not in (None, "", *REQUEST_KINDS):
        raise RelabelError(
            f"{path}: line {number}: column 'kind': unknown kind {kind!r} (one of {', '.join(REQUEST_KINDS)})"
        )
    return record


async def relabel(
    queries: dict[str, dict[str, dict[str, Any]]],
    judge: Judge,
    reference_model: str,
    *,
    log_text: bool = False,
    now: datetime | None = None,
    questions: dict[str, str] | None = None,
    concurrency: int = 1,
    on_query: Callable[[int, int], None] | None = None,
) -> Iterator[TrafficRow]:
    """Traffic rows labelled by ``judge`` against ``reference_model``'s response, in query order.

    A query without the reference model, or whose reference has no response, gets no rows (there
    is nothing to agree with); a model without a response or whose judging failed gets a row with
    a missing label. ``questions`` (query_id -> question text) stands in for a table without a
    ``prompt`` column (the ``llm`` judge reads the question). ``concurrency`` queries are judged
    at once (an ``llm`` judge's endpoint serves several); ``on_query(done, total)`` reports progress.
    """
    now = now or datetime.now(UTC)
    questions = questions or {}
    judged = [
        (query_id, answers)
        for query_id, answers in queries.items()
        if isinstance(answers.get(reference_model, {}).get("response"), str)
    ]
    gate = asyncio.Semaphore(max(1, concurrency))
    done = 0

    async def judge_query(
        query_id: str, answers: dict[str, dict[str, Any]]
    ) -> dict[str, Verdict | JudgeError]:
        nonlocal done
        texts = {m: r["response"] for m, r in answers.items() if isinstance(r.get("response"), str)}
        question = str(answers[reference_model].get("prompt") or questions.get(query_id, ""))
        async with gate:
            labels = await label_answers(judge, question, reference_model, texts)
        done += 1
        if on_query is not None:
            on_query(done, len(judged))
        return labels

    verdicts = await asyncio.gather(*(judge_query(q, a) for q, a in judged))
    rows = [
        _labelled_row(query_id, model, record, labels.get(model), now, log_text)
        for (query_id, answers), labels in zip(judged, verdicts, strict=True)
        for model, record in answers.items()
    ]
    return iter(rows)


def _labelled_row(
    query_id: str,
    model: str,
    record: dict[str, Any],
    verdict: Verdict | JudgeError | None,
    now: datetime,
    log_text: bool,
) -> TrafficRow:
    """One runs row as a traffic row labelled by its verdict (a missing label without one)."""
    return TrafficRow(
        query_id=query_id,
        model=model,
        correct=verdict.correct if isinstance(verdict, Verdict) else None,
        prompt_tokens=int(record.get("prompt_tokens") or 0),
        completion_tokens=int(record.get("completion_tokens") or 0),
        cost_usd=float(record.get("cost_usd") or 0.0),
        logprobs=record.get("logprobs"),
        latency_ms=record.get("latency_ms"),
        dataset=None if record.get("dataset") is None else str(record["dataset"]),
        kind=str(record.get("kind") or DEFAULT_KIND),
        timestamp=now,
        judge=verdict.judge if isinstance(verdict, Verdict) else None,
        route=record.get("route") if isinstance(record.get("route"), dict) else None,
        prompt=record.get("prompt") if log_text else None,
        response=record.get("response") if log_text else None,
    )


__all__ = ["JudgeError", "RelabelError", "read_queries", "relabel"]
