"""Send every prompt to every model, grade, record: the engine of ``cascade collect``.

Each (question, model) call asks for ``logprobs`` with ``top_logprobs=K`` (llama.cpp needs K >= 1
for logprobs at all), temperature 0, ``n=1``; a bounded number of calls run at once. A row is
appended to the runs file as soon as its call finishes, so an interrupted run resumes where it
stopped. A call that still fails after its retries writes no row (it is retried on the next run)
and is counted.

A question's ``tools``, ``tool_choice`` and ``response_format`` are sent with it; each row records the
request's kind, the answer's calls and whether it passed the structural checks
(``collection.answers``), and a ``tool_call`` question is graded on those calls.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from collection.answers import answer_fields, grade_message
from collection.prompts import Prompt
from collection.runs_writer import RunsWriter
from collection.scorer_calls import ScorerCallsOptions, scorer_calls
from collection.targets import Target
from collection.upstream_call import CallError, call_model
from money.charges import call_charge, completion_bound
from policies.request_defaults import merge_request_defaults
from policies.truncation import cut_short

# Completion tokens asked for when neither the question, the run nor the target's defaults set a cap
# (one token: the answer letter of a multiple-choice question).
DEFAULT_MAX_TOKENS = 1


@dataclass(frozen=True)
class CollectOptions:
    """Request parameters shared by every call."""

    top_logprobs: int = 15
    max_tokens: int | None = None
    temperature: float = 0.0
    concurrency: int = 2
    retries: int = 2
    keep_prompt: bool = False
    # The black-box scorers' extra calls after each answer (collection.scorer_calls).
    scorer_calls: ScorerCallsOptions = field(default_factory=ScorerCallsOptions)
    # Answers already recorded, by (query_id, model): reused instead of asking the model again.
    answers_from: dict[tuple[str, str], dict[str, Any]] | None = None


@dataclass
class CollectSummary:
    """What one run did."""

    written: int = 0
    skipped: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)


def request_body(prompt: Prompt, target: Target, options: CollectOptions) -> dict[str, Any]:
    """The chat-completions body for one question, as the gateway would send it upstream.

    The collector is the client: its fields (messages, temperature, a cap set by the question or
    the run) are merged over the target's request defaults exactly as the gateway merges a client's
    (``policies.request_defaults``); logprobs are then added as on a scored stage.
    """
    client: dict[str, Any] = {
        "messages": prompt.messages(),
        "temperature": options.temperature,
        **prompt.request_fields(),
    }
    cap = collector_cap(prompt, target, options)
    if cap is not None:
        client["max_tokens"] = cap
    body = merge_request_defaults(client, target.request_defaults)
    body.update(
        {
            "model": target.model,
            "logprobs": True,
            "top_logprobs": max(1, options.top_logprobs),
            "n": 1,
            "stream": False,
        }
    )
    return body


def collector_cap(prompt: Prompt, target: Target, options: CollectOptions) -> int | None:
    """The completion cap the collector, as the client, sets: the question's, else the run's, else
    ``DEFAULT_MAX_TOKENS`` when the target's request defaults set none either (None: the defaults' cap)."""
    cap = prompt.max_tokens or options.max_tokens
    if cap is None and (target.request_defaults is None or target.request_defaults.completion_cap() is None):
        cap = DEFAULT_MAX_TOKENS
    return cap


def _without_bytes(content: Any) -> Any:
    """Token logprobs without their ``bytes`` (each token's UTF-8, which its text already says and
    no scorer reads: 15% of a gzipped top-10 runs file)."""
    if not isinstance(content, list):
        return content
    kept = []
    for entry in content:
        if isinstance(entry, dict):
            entry = {k: v for k, v in entry.items() if k != "bytes"}
            alternatives = entry.get("top_logprobs")
            if isinstance(alternatives, list):
                entry["top_logprobs"] = [
                    {k: v for k, v in alt.items() if k != "bytes"} if isinstance(alt, dict) else alt
                    for alt in alternatives
                ]
        kept.append(entry)
    return kept


def build_row(
    prompt: Prompt,
    target: Target,
    body: dict[str, Any],
    latency_ms: float,
    keep_prompt: bool,
    request: dict[str, Any],
    client_cap: int | None = None,
) -> dict[str, Any]:
    """One runs-table row (docs/contracts.md#runs-table) from an upstream response body.

    ``request`` is the body that was sent: its tools and formats are what the answer is checked
    against, and it bounds what an answer without usable usage is charged. The row's cost and token
    counts are the call's charge by the one charging rule (``money.charges.call_charge``, as every
    upstream call of the gateway and of the scorer calls): the usage when it reports both counts as
    integers, else ``per_query_usd`` or the estimate that errs high (its token counts are the ones
    that estimate priced). ``client_cap`` is the completion cap the collector set as the client
    (``collector_cap``; None: the target's defaults capped it): an answer cut at another cap is
    ``truncated`` (``policies.truncation``).
    """
    try:
        choice = body["choices"][0]
        message = choice["message"]
        text = message.get("content") or ""
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise CallError(f"malformed response from {target.name}: no choices[0].message") from exc
    charge = call_charge(target.price, body.get("usage"), orjson.dumps(request), answer=body)
    logprobs = _without_bytes((choice.get("logprobs") or {}).get("content"))
    row: dict[str, Any] = {
        "query_id": prompt.query_id,
        "model": target.name,
        "correct": grade_message(prompt, message),
        "cost_usd": charge.usd,
        "prompt_tokens": charge.prompt_tokens,
        "completion_tokens": charge.completion_tokens,
        "latency_ms": round(latency_ms, 1),
        "response": text,
        "answer": prompt.answer,
        "logprobs": logprobs,
        "truncated": cut_short({} if client_cap is None else {"max_tokens": client_cap}, body),
        **answer_fields(request, message),
    }
    # The parts the usage reported (priced at the part rates by calibration); 0 when not reported.
    parts = {
        "cached_tokens": charge.cache_read_tokens,
        "cache_write_tokens": charge.cache_write_tokens,
        "reasoning_tokens": charge.reasoning_tokens,
    }
    row.update((name, count) for name, count in parts.items() if count)
    if prompt.dataset:
        row["dataset"] = prompt.dataset
    if prompt.subject:
        row["subject"] = prompt.subject
    if keep_prompt:
        row["prompt"] = prompt.prompt
    return row


async def answer_row(
    client: httpx.AsyncClient, prompt: Prompt, target: Target, options: CollectOptions
) -> dict[str, Any]:
    """The row of one (question, model): the answer (asked, or the recorded one with
    ``answers_from``), then the black-box scorers' calls on it when asked (``scorer_calls``)."""
    stage_body = request_body(prompt, target, options)
    if options.answers_from is not None:
        recorded = options.answers_from.get((prompt.query_id, target.name))
        if recorded is None:
            raise CallError(f"no recorded answer of {target.name} to {prompt.query_id}")
        row = dict(recorded)
    else:
        body, latency_ms = await call_model(client, target, stage_body, options.retries)
        cap = collector_cap(prompt, target, options)
        row = build_row(prompt, target, body, latency_ms, options.keep_prompt, stage_body, cap)
        # The bytes of the request as sent (compact JSON, as the gateway sends it): what the charging
        # rule bounds the prompt by when a call has no usage, e.g. a cheap stage cancelled after a
        # prefix (calibration.prefix_cost).
        row["request_bytes"] = len(json.dumps(stage_body, separators=(",", ":"), ensure_ascii=False).encode())
        # ... and the completion cap it sent: a cancelled call is charged within it.
        row["completion_cap"] = completion_bound(stage_body)
    if options.scorer_calls.wanted(target.name):
        row["scorer_calls"] = await scorer_calls(
            client, target, stage_body, str(row.get("response") or ""), options.scorer_calls, options.retries
        )
    return row


async def collect(
    prompts: list[Prompt],
    targets: list[Target],
    writer: RunsWriter,
    done: set[tuple[str, str]],
    options: CollectOptions,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> CollectSummary:
    """Run every (prompt, target) pair not in ``done``; rows go to ``writer`` as they finish.

    ``on_progress(model_name)`` is called after each finished pair (written, failed or skipped).
    """
    summary = CollectSummary()
    work = [(p, t) for p in prompts for t in targets if (p.query_id, t.name) not in done]
    summary.skipped = len(prompts) * len(targets) - len(work)
    semaphore = asyncio.Semaphore(max(1, options.concurrency))
    limits = httpx.Limits(max_connections=max(1, options.concurrency) * max(1, len(targets)))

    async with httpx.AsyncClient(transport=transport, limits=limits) as client:

        async def one(prompt: Prompt, target: Target) -> None:
            async with semaphore:
                try:
                    writer.write(await answer_row(client, prompt, target, options))
                    summary.written += 1
                except CallError as exc:
                    summary.failed += 1
                    if len(summary.errors) < 20:
                        summary.errors.append(f"{prompt.query_id}: {exc}")
            if on_progress is not None:
                on_progress(target.name)

        await asyncio.gather(*(one(p, t) for p, t in work))
    return summary
