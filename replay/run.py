"""Send a labelled prompt set through a running cascade gateway: the engine of ``cascade replay``.

Each *arm* is one way of choosing the route: a tier (header ``X-Cascade-Tier``) or a numeric
budget (header ``X-Cascade-Max-Cost-Usd``). Every (arm, question) pair becomes one non-streamed
chat completion with the question rendered exactly as ``cascade collect`` renders it
(``Prompt.messages()``, with its ``tools``, ``tool_choice`` and ``response_format``), graded by the
same grader (a ``tool_call`` question on the answer's calls, ``collection.answers``), with the same
structural check recorded (``valid``, ``problem``), and one result row appended to a JSONL file
as soon as it is done (``ReplayOptions.stream``: streamed instead, with its time to the first
content token, replay.streamed): cost, escalation, served tier and policy come from the ``x-cascade-*``
response headers (docs/contracts.md#response-headers). A rerun skips the pairs already in the file, so an
interrupted replay continues where it stopped. A request that still fails after its retries
(429 rate limit, 5xx, connection errors) writes no row and is retried by the next run; an answer
no retry can change (400 unknown tier, 401, 404, 413, budget exhausted, no policy) stops the run
with the gateway's own message.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from collection.answers import answer_fields, grade_message
from collection.prompts import Prompt
from collection.runs_writer import RunsWriter
from policies.response_decision import DecisionReader, ResponseDecision
from replay.streamed import StreamedAnswer, read_stream

RETRY_STATUSES = {429, 500, 502, 503, 504}
# 429/503 codes that will not clear by waiting a few seconds.
FATAL_CODES = {"budget_exceeded", "policy_unavailable"}
MAX_RETRY_AFTER_S = 30.0


class ReplayError(Exception):
    """The replay cannot go on (gateway unreachable or refusing); a one-line message."""


@dataclass(frozen=True)
class Arm:
    """One route choice to measure: a tier name or a budget in USD per request."""

    tier: str | None = None
    max_cost_usd: float | None = None

    def __post_init__(self) -> None:
        if (self.tier is None) == (self.max_cost_usd is None):
            raise ValueError("an arm is either a tier or a budget")

    @property
    def key(self) -> str:
        """Stable name used in result rows and reports: ``tier:NAME`` or ``budget:USD``."""
        return f"tier:{self.tier}" if self.tier is not None else f"budget:{self.max_cost_usd!r}"

    @property
    def kind(self) -> str:
        """``tier`` or ``budget``."""
        return "tier" if self.tier is not None else "budget"

    def headers(self) -> dict[str, str]:
        """The routing header this arm sends."""
        if self.tier is not None:
            return {"X-Cascade-Tier": self.tier}
        return {"X-Cascade-Max-Cost-Usd": repr(self.max_cost_usd)}


@dataclass(frozen=True)
class ReplayOptions:
    """How requests are sent."""

    api_key: str | None = None
    temperature: float = 0.0
    max_tokens: int | None = None
    concurrency: int = 2
    timeout_s: float = 300.0
    retries: int = 2
    # Stream every request (``stream: true``) and record its time to the first content token.
    stream: bool = False

    def request_fields(self) -> dict[str, Any]:
        """The request options recorded with every row (a resumed run must use the same); ``stream``
        only when streamed, so rows written before it existed still match a run that does not stream."""
        fields: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.stream:
            fields["stream"] = True
        return fields


@dataclass
class ReplaySummary:
    """What one run did."""

    written: int = 0
    skipped: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)


def gateway_base(url: str) -> str:
    """The gateway's root URL (``http://host:port``), accepting a trailing ``/`` or ``/v1``."""
    base = url.strip().rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    if not base.startswith(("http://", "https://")):
        raise ReplayError(f"gateway URL must start with http:// or https://, got {url!r}")
    return base


def auth_headers(api_key: str | None) -> dict[str, str]:
    """``Authorization: Bearer`` when a key is given (an open gateway needs none)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def error_message(response: httpx.Response) -> tuple[str, str | None]:
    """(message, code) of an OpenAI-shaped error body, or the start of the raw body."""
    try:
        error = response.json().get("error") or {}
        return str(error.get("message") or response.text[:200]), error.get("code")
    except (ValueError, AttributeError):
        return response.text[:200].strip() or response.reason_phrase, None


async def served_tiers(
    base: str, api_key: str | None, timeout_s: float = 30.0, transport: httpx.AsyncBaseTransport | None = None
) -> list[str]:
    """Tiers the gateway serves (``cascade/<tier>`` in ``GET /v1/models``); checks reachability and key."""
    try:
        async with httpx.AsyncClient(transport=transport, timeout=timeout_s) as client:
            response = await client.get(f"{base}/v1/models", headers=auth_headers(api_key))
    except httpx.HTTPError as exc:
        raise ReplayError(f"cannot reach the gateway at {base} ({type(exc).__name__}: {exc})") from exc
    if response.status_code != 200:
        message, _ = error_message(response)
        raise ReplayError(
            f"gateway at {base} answered GET /v1/models with HTTP {response.status_code}: {message}"
        )
    try:
        names = [str(item["id"]) for item in response.json()["data"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ReplayError(
            f"{base}/v1/models is not an OpenAI model list; is this a cascade gateway?"
        ) from exc
    return [name.split("/", 1)[1] for name in names if name.startswith("cascade/")]


def request_body(prompt: Prompt, options: ReplayOptions) -> dict[str, Any]:
    """The chat-completions body for one question (the route comes from the arm's header)."""
    body: dict[str, Any] = {
        "model": "cascade",
        "messages": prompt.messages(),
        "temperature": options.temperature,
        "stream": options.stream,
        **prompt.request_fields(),
    }
    if options.stream:
        body["stream_options"] = {"include_usage": True}
    max_tokens = prompt.max_tokens or options.max_tokens
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


def _float_header(response: httpx.Response, name: str) -> float | None:
    value = response.headers.get(name)
    try:
        return float(value) if value is not None and value not in ("", "none", "nan") else None
    except ValueError:
        return None


def result_row(
    prompt: Prompt, arm: Arm, response: httpx.Response, latency_ms: float, options: ReplayOptions
) -> dict[str, Any]:
    """One result row from a 200 response: grade, cost, escalation, served tier/policy/model."""
    decision = DecisionReader(response.headers).decision()
    if decision.cost_usd is None or decision.escalated is None:
        raise ReplayError(
            f"{response.request.url} answered without x-cascade-cost-usd / x-cascade-escalated "
            "headers; is this a cascade gateway?"
        )
    try:
        body = response.json()
        choice = body["choices"][0]
        message = choice["message"]
        message.get("content")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ReplayError(f"{response.request.url} answered 200 without choices[0].message") from exc
    return row_fields(prompt, arm, decision, message, body.get("usage") or {}, latency_ms, options)


def row_fields(
    prompt: Prompt,
    arm: Arm,
    decision: ResponseDecision,
    message: dict[str, Any],
    usage: dict[str, Any],
    latency_ms: float,
    options: ReplayOptions,
) -> dict[str, Any]:
    """One result row: the graded ``message`` and the response's ``decision``."""
    text = message.get("content") or ""
    return {
        "arm": arm.key,
        "query_id": prompt.query_id,
        "correct": grade_message(prompt, message),
        "cost_usd": decision.cost_usd,
        "escalated": bool(decision.escalated),
        "latency_ms": round(latency_ms, 1),
        "tier": decision.tier,
        "policy_id": decision.policy_id,
        "model": decision.model,
        "models_called": list(decision.models_called),
        "score": decision.score,
        "overhead_ms": decision.overhead_ms,
        "degraded": decision.degraded,
        "over_budget": decision.over_budget,
        # A routed tier's decision (routed, hybrid_direct, hybrid_cascade, fallback); None on a cascade.
        "mechanism": decision.mechanism,
        "prompt_tokens": int(usage.get("prompt_tokens") or 0),
        "completion_tokens": int(usage.get("completion_tokens") or 0),
        "response": text,
        **answer_fields(prompt.request_fields(), message),
        **options.request_fields(),
    }


def streamed_row(prompt: Prompt, arm: Arm, answer: StreamedAnswer, options: ReplayOptions) -> dict[str, Any]:
    """One result row from a streamed answer: its decision as the stream carried it (the final
    facts from its last chunk's ``cascade`` object: the headers left before a live stage ended, or
    before the decision), and its time to the first content token."""
    decision = answer.decision.decision()
    if not decision.final or decision.cost_usd is None:
        raise ReplayError("a streamed answer ended without its cascade facts; is this a cascade gateway?")
    row = row_fields(prompt, arm, decision, answer.message, answer.usage, answer.latency_ms, options)
    row.update(
        ttft_ms=None if answer.ttft_ms is None else round(answer.ttft_ms, 1),
        commit=decision.commit,
        commit_tokens=decision.commit_tokens,
    )
    return row


class RetriesExhaustedError(Exception):
    """A request failed with a transient error on every attempt (retried by the next run)."""


async def send(
    client: httpx.AsyncClient, base: str, prompt: Prompt, arm: Arm, options: ReplayOptions
) -> dict[str, Any]:
    """POST one question on one arm with bounded retries; the result row."""
    headers = {**auth_headers(options.api_key), **arm.headers()}
    payload = request_body(prompt, options)
    last = ""
    unreachable = False
    for attempt in range(options.retries + 1):
        wait = min(4.0, 0.5 * 2**attempt) * (0.5 + random.random())
        started = time.perf_counter()
        try:
            if options.stream:
                read = await read_stream(client, f"{base}/v1/chat/completions", payload, headers)
                if isinstance(read, StreamedAnswer):
                    return streamed_row(prompt, arm, read, options)
                response = read
            else:
                response = await client.post(f"{base}/v1/chat/completions", json=payload, headers=headers)
        except httpx.ConnectError as exc:
            last, unreachable = f"cannot reach the gateway at {base} ({exc})", True
        except httpx.HTTPError as exc:
            last, unreachable = f"{type(exc).__name__}: {exc}", False
        else:
            unreachable = False
            latency_ms = (time.perf_counter() - started) * 1000
            if response.status_code == 200:
                return result_row(prompt, arm, response, latency_ms, options)
            message, code = error_message(response)
            if response.status_code not in RETRY_STATUSES or code in FATAL_CODES:
                raise ReplayError(f"{arm.key}: gateway answered HTTP {response.status_code}: {message}")
            last = f"HTTP {response.status_code}: {message}"
            retry_after = _float_header(response, "retry-after")
            if retry_after is not None:
                wait = min(MAX_RETRY_AFTER_S, max(wait, retry_after))
        if attempt < options.retries:
            await asyncio.sleep(wait)
    if unreachable:  # the gateway went away: every other request would fail the same way
        raise ReplayError(last)
    raise RetriesExhaustedError(last)


async def replay(
    base: str,
    prompts: list[Prompt],
    arms: list[Arm],
    writer: RunsWriter,
    done: set[tuple[str, str]],
    options: ReplayOptions,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> ReplaySummary:
    """Send every (arm, prompt) pair not in ``done`` with at most ``options.concurrency`` in flight.

    Questions go in order, each on every arm, so a refused arm (unknown tier) fails on the first
    question. ``on_progress(arm_key)`` is called after each finished pair. The first ReplayError
    stops new requests (those in flight finish and are recorded) and is raised.
    """
    summary = ReplaySummary()
    work = [(p, a) for p in prompts for a in arms if (a.key, p.query_id) not in done]
    summary.skipped = len(prompts) * len(arms) - len(work)
    semaphore = asyncio.Semaphore(max(1, options.concurrency))
    limits = httpx.Limits(max_connections=max(1, options.concurrency))
    fatal: list[ReplayError] = []

    async with httpx.AsyncClient(transport=transport, limits=limits, timeout=options.timeout_s) as client:

        async def one(prompt: Prompt, arm: Arm) -> None:
            async with semaphore:
                if fatal:
                    return
                try:
                    writer.write(await send(client, base, prompt, arm, options))
                    summary.written += 1
                except RetriesExhaustedError as exc:
                    summary.failed += 1
                    if len(summary.errors) < 20:
                        summary.errors.append(f"{arm.key} {prompt.query_id}: {exc}")
                except ReplayError as exc:
                    fatal.append(exc)
                    return
            if on_progress is not None:
                on_progress(arm.key)

        await asyncio.gather(*(one(p, a) for p, a in work))
    if fatal:
        raise fatal[0]
    return summary
