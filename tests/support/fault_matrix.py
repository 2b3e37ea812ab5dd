"""The fault matrix: every upstream fault on every call a request makes, on every API, generated.

A cell is (endpoint, streamed or not, the call that faults, the fault). ``cells()`` generates them
as the product of the axes, less the combinations that do not exist (``prune_reason`` says why of
each, by rule, never by listing cells). For a cell, ``script_cell`` scripts the upstream so that
exactly that call meets the fault and every other call is answered normally; every reply is metered
(tests/support/provider_bills.py), so the upstream's ``bills`` say what a provider would bill.

The calls: ``cheap`` (the scored first stage), ``final`` (the last stage, after an escalation),
``verifier``, ``consistency`` (every sample), ``self_report`` (the black-box scorers' extra calls),
``shadow`` (the learning sampler's call to a pool model after the response) and ``prefix_cheap``
(the cheap stage of a tier with the ``prefix`` commit rule, streamed and decided on its first
tokens: gateway/streaming/prefix_commit.py). The faults are in ``FAULTS``; ``fault_reply`` builds each;
``cancelled_on_escalation`` is a long unsure answer whose prefix is rejected, so the gateway
cancels its stream mid-way; its upstream stops when the stream is closed and bills the tokens it
wrote (as llama-server does), and the prefix setup's models declare ``CANCEL_OVERRUN_TOKENS``, so the
gateway charges the chunks it read plus that many (``money.charges.cancelled_stream_charge``).
tests/gateway/test_fault_matrix.py runs the cells.

The limit cases (``RECORD.add_limit``) also cover Redis: ``REDIS_FAULTS`` are the faults of the
shared Redis a rate limit must hold through, run by tests/reliability/test_rate_limits_redis_pause.py
on a private redis-server under two replicas (case ``redis-<fault>``).
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from typing import Any

import orjson

from tests.support.scripted_upstream import Reply, ScriptedUpstream

ENDPOINTS = ("chat", "completions", "responses", "messages")
PATHS = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "responses": "/v1/responses",
    "messages": "/v1/messages",
}
CALLS = ("cheap", "final", "verifier", "consistency", "self_report", "shadow", "prefix_cheap")
BLACKBOX_CALLS = ("verifier", "consistency", "self_report")
FAULTS = (
    "timeout_before_headers",
    "timeout_mid_body",
    "cut_body",
    "connection_drop",
    "http_5xx",
    "garbage_json",
    "no_usage",
    "string_usage",
    "huge_usage",
    "uncapped_answer",
    "hostile_nesting",
    "cancelled_on_escalation",
    "reset_before_byte",
)
# Redis faults in the middle of a burst on a rate-limited key (gateway.keys.outage): one pipeline past
# ``redis_timeout_s`` (a 150 ms CLIENT PAUSE), a 250 ms CLIENT PAUSE (both shorter than the outage
# rule: Redis decides every admission), and a Redis frozen (SIGSTOP) past the outage rule (degraded
# mode: each replica counts on from what Redis last said, within its share of the headroom).
REDIS_FAULTS = ("slow_pipeline", "pause_250ms", "frozen_past_outage_rule")
# Faults met by the call's first attempt only: its retry is answered.
TRANSIENT_FAULTS = frozenset({"reset_before_byte"})
# The prefix setup's commit rule (its default tier small -> large decides on this many tokens) and
# the length of an answer cancelled on escalation, streamed slowly enough to be cut mid-way.
PREFIX_TOKENS = 3
CANCELLED_TOKENS = 40
# Tokens the prefix setup's models declare they may write after the gateway closes a stream: at a
# chunk every 20 ms, the gateway may take 0.3 s to decide and close before the bill passes the charge.
CANCEL_OVERRUN_TOKENS = 16
CANCELLED_CHUNK_DELAY_S = 0.02
# Every model's ``timeout_s``; a stalled upstream waits far longer (its handler is cancelled when
# the gateway gives up, so the stall costs the test nothing).
MODEL_TIMEOUT_S = 0.5
STALL_S = 3.0
UNCAPPED_TOKENS = 20_000
NESTING_DEPTH = 600  # readable (orjson reads 1,024 levels), not writable (orjson writes 254)
# USD per million (prompt, completion) tokens by upstream id: every model priced per token, in
# whole numbers so that a bill is an exact number of nano-USD (1 USD/Mtok = 1,000 nano-USD/token).
PRICES: dict[str | None, tuple[float, float]] = {
    "up-small": (1.0, 2.0),
    "up-medium": (3.0, 6.0),
    "up-large": (10.0, 30.0),
}
QUESTION = "What is the capital of France?"
MESSAGES_MAX_TOKENS = 256  # the Messages API requires a cap; the other APIs are sent none


@dataclass(frozen=True, slots=True)
class Cell:
    """One cell of the matrix."""

    endpoint: str
    stream: bool
    call: str
    fault: str

    @property
    def id(self) -> str:
        """The pytest id: ``endpoint-stream|whole-call-fault``."""
        return f"{self.endpoint}-{'stream' if self.stream else 'whole'}-{self.call}-{self.fault}"

    @property
    def setup(self) -> str:
        """Which gateway serves the cell: the policy scorer (and learning) its call needs."""
        if self.call in BLACKBOX_CALLS:
            return self.call
        if self.call == "prefix_cheap":
            return "prefix"
        return "shadow" if self.call == "shadow" else "logprobs"


def prune_reason(cell: Cell) -> str | None:
    """Why ``cell`` does not exist (None: it does). Each rule is a property of the gateway."""
    if cell.call in BLACKBOX_CALLS and cell.endpoint == "completions":
        # gateway/stages/blackbox_scoring.py: black-box scorers score chat requests; a legacy completion
        # gets no score and makes no verifier, sample or self-report call.
        return "a legacy completion is never black-box scored: that call is never made"
    if cell.call == "prefix_cheap" and not cell.stream:
        # gateway/streaming/prefix_commit.py: a request that is not streamed keeps the buffer rule.
        return "a whole answer is never decided on a prefix: the prefix stage is never streamed"
    if cell.fault == "cancelled_on_escalation" and cell.call != "prefix_cheap":
        # Only the prefix rule cancels a call it started; to any other call an unsure answer is no fault.
        return "only a prefix tier's cheap stage is cancelled on escalation"
    return None


def all_cells() -> list[Cell]:
    """Every combination of the axes, pruned or not."""
    return [Cell(*axes) for axes in itertools.product(ENDPOINTS, (False, True), CALLS, FAULTS)]


def cells() -> list[Cell]:
    """The cells that exist."""
    return [cell for cell in all_cells() if prune_reason(cell) is None]


def pruned_reasons() -> Counter[str]:
    """How many combinations each pruning rule removed."""
    return Counter(reason for cell in all_cells() if (reason := prune_reason(cell)) is not None)


# -- replies ---------------------------------------------------------------------------------------


def answer(confidence: float | None = 0.99, content: str = "Paris is the capital of France.") -> Reply:
    """A normal metered answer (its usage exactly what is billed)."""
    return Reply(content=content, confidence=confidence, usage_report="exact")


def fault_reply(fault: str, *, uncapped_tokens: int | None = None) -> Reply:
    """A metered reply failing as ``fault`` says (``uncapped_tokens``: an answer that long, or cut at
    the cap the request sends, whatever the fault)."""
    base: dict[str, Any] = {"usage_report": "exact", "uncapped_tokens": uncapped_tokens}
    changes: dict[str, Any] = {
        "timeout_before_headers": {"delay_s": STALL_S},
        "timeout_mid_body": {"stall_body_s": STALL_S},
        "cut_body": {"cut_body": True},
        "connection_drop": {"drop_connection": True},
        "reset_before_byte": {"drop_connection": True},
        "http_5xx": {"status": 503},
        "garbage_json": {"garbage": True},
        "no_usage": {"usage_report": "absent"},
        "string_usage": {"usage_report": "string"},
        "huge_usage": {"usage_report": "huge"},
        "uncapped_answer": {"uncapped_tokens": UNCAPPED_TOKENS, "confidence": None},
        "hostile_nesting": {"nesting_depth": NESTING_DEPTH, "confidence": None},
        "cancelled_on_escalation": {
            "uncapped_tokens": uncapped_tokens or CANCELLED_TOKENS,
            "confidence": 0.3,
            "chunk_delay_s": CANCELLED_CHUNK_DELAY_S,
            "stops_on_close": True,
        },
    }[fault]
    return Reply(**{**base, **changes})


def script_cell(upstream: ScriptedUpstream, cell: Cell) -> str:
    """Script the upstream so that the cell's call, and only it, meets the cell's fault (every
    attempt of it: retries meet the fault too; a transient fault only its first attempt); returns
    the upstream id of the model that meets it."""
    fault = fault_reply(cell.fault)
    small, medium, large = "up-small", "up-medium", "up-large"
    upstream.set_default(medium, answer())
    upstream.set_default(large, answer(content="Paris."))
    if cell.call in ("cheap", "prefix_cheap"):
        faulted = small
    elif cell.call == "final":
        upstream.set_default(small, answer(confidence=0.3))  # unsure: escalates
        faulted = large
    elif cell.call == "verifier":  # the policy's verifier is ``medium``
        upstream.set_default(small, answer(confidence=None))
        faulted = medium
    elif cell.call in ("consistency", "self_report"):  # extra calls to the stage's own model
        upstream.script(small, answer(confidence=None))
        faulted = small
    elif cell.call == "shadow":  # accepted at ``small``; the sampler then calls ``medium`` and ``large``
        upstream.set_default(small, answer())
        faulted = medium
    else:
        raise ValueError(f"unknown call {cell.call!r}")
    if cell.fault in TRANSIENT_FAULTS:
        upstream.script(faulted, fault)
        upstream.set_default(faulted, answer(content="Paris.") if faulted == large else answer())
    else:
        upstream.set_default(faulted, fault)
    return faulted


def client_body(endpoint: str, stream: bool) -> dict[str, Any]:
    """The client's request on ``endpoint`` (no completion cap, but on Messages, which requires one)."""
    messages = [{"role": "user", "content": QUESTION}]
    body: dict[str, Any] = {
        "chat": {"model": "cascade", "messages": messages},
        "completions": {"model": "cascade", "prompt": QUESTION},
        "responses": {"model": "cascade", "input": QUESTION},
        "messages": {"model": "cascade", "max_tokens": MESSAGES_MAX_TOKENS, "messages": messages},
    }[endpoint]
    if stream:
        body["stream"] = True
    return body


def error_shape_problem(endpoint: str, status: int, body: bytes) -> str | None:
    """Why an error response (``status``, ``body``) on ``endpoint`` is not in the API's own shape
    (None: it is, or it is no error)."""
    if status < 400:
        return None
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return f"error body is not JSON: {body[:80]!r}"
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return f"error body has no error.message: {body[:80]!r}"
    if endpoint == "messages" and payload.get("type") != "error":
        return "a Messages error without type 'error'"
    return None


# -- the record of a run ---------------------------------------------------------------------------


class MatrixRecord:
    """The outcome of every cell run in this process, for the summary printed after the tests."""

    def __init__(self) -> None:
        self.outcomes: dict[Cell, list[str]] = {}
        self.limits: dict[str, bool] = {}

    def add(self, cell: Cell, violations: list[str]) -> None:
        """Record one cell's violated invariants (empty: it held)."""
        self.outcomes[cell] = violations

    def add_limit(self, case: str, held: bool) -> None:
        """Record whether the limit held in one concurrency case (``endpoint-fault``)."""
        self.limits[case] = held

    def summary(self) -> list[str]:
        """Lines: the cell count, the pruning, and the failing cells grouped by fault, call, endpoint
        and invariant."""
        failed = {cell: v for cell, v in self.outcomes.items() if v}
        pruned = pruned_reasons()
        lines = [
            f"fault matrix: {len(cells())} cells ({len(all_cells())} combinations, "
            f"{sum(pruned.values())} pruned); {len(self.outcomes)} run, {len(failed)} failed",
            *(f"  pruned {count}: {reason}" for reason, count in pruned.items()),
        ]
        for axis in ("fault", "call", "endpoint"):
            counts = Counter(getattr(cell, axis) for cell in failed)
            if counts:
                lines.append(f"  failed by {axis}: " + ", ".join(f"{k} {n}" for k, n in counts.most_common()))
        streams = Counter("stream" if cell.stream else "whole" for cell in failed)
        if streams:
            lines.append("  failed by form: " + ", ".join(f"{k} {n}" for k, n in streams.most_common()))
        kinds = Counter(v.split(":")[0] for vs in failed.values() for v in vs)
        if kinds:
            lines.append("  violations: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
        pairs = Counter((cell.fault, cell.call) for cell in failed)
        for (fault, call), count in sorted(pairs.items()):
            lines.append(f"  {fault} x {call}: {count}")
        if self.limits:
            broken = sorted(case for case, held in self.limits.items() if not held)
            lines.append(f"limit under concurrency: {len(self.limits)} cases, {len(broken)} failed")
            lines.extend(f"  failed: {case}" for case in broken)
        return lines


RECORD = MatrixRecord()
