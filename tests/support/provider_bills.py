"""What a provider bills for each request it receives, and the faulty bodies it may send back.

The scripted upstream (tests/support/scripted_upstream.py) keeps one ``Bill`` per request that
reached it and was answered 200, written when the request arrives: a provider bills what it
generated even when the client then timed out, the connection dropped or the body was cut on the
way. A bill counts one prompt token per byte received (more than any tokenizer counts for that
text) and the completion tokens of the answer it generated, within the completion cap the request
sent (a provider stops at the cap; an answer with no cap sent runs to its own length). An HTTP
error (5xx, 429, 4xx) is billed nothing.

A *metered* reply (``Reply.usage_report`` set) is generated from the request: its text is cut at
the request's cap, and its usage on the wire is the bill, reported as ``USAGE_REPORTS`` says (exactly,
not at all, as strings, or as a huge lie). Tests price bills with ``billed_usd``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# The ways a metered reply reports its usage: the bill itself, no usage field, the counts as JSON
# strings, and counts far above anything generated (the largest a 64-bit unsigned integer holds).
USAGE_REPORTS = ("exact", "absent", "string", "huge")
HUGE_COUNT = 2**64 - 1
# Fields an OpenAI-compatible server may read as the completion cap.
_CAP_FIELDS = ("max_completion_tokens", "max_tokens", "n_predict")
# The one token of a reply whose content a hostile, deeply nested value replaces on the wire.
NEST_MARK = "@@nested@@"
# A 200 answer that is not JSON (cut inside a string), whole or as one SSE event.
GARBAGE_BODY = (
    b'{"id": "cmpl-garbage", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Par'
)
GARBAGE_EVENTS = (b'data: {"id": "chunk-garbage", "choices": [{"index": 0, "delta": {"content": "Pa\n\n',)


@dataclass(frozen=True, slots=True)
class Bill:
    """What a provider bills for one request it received (see the module docstring).

    ``sent`` is the request body as received; ``at`` the wall-clock time (``time.time()``) it
    arrived, to tell a request's own calls from calls made after its response (shadow calls).
    """

    model: str | None
    path: str
    sent: bytes
    prompt_tokens: int
    completion_tokens: int
    at: float


def sent_cap(body: Mapping[str, Any]) -> int | None:
    """The completion cap a request sends: its largest positive cap field, or None (no cap)."""
    caps = [
        value
        for name in _CAP_FIELDS
        if type(value := body.get(name)) is int and value > 0  # a bool or float cap is no cap here
    ]
    return max(caps) if caps else None


def capped_tokens(produced: int, body: Mapping[str, Any]) -> int:
    """Completion tokens one choice is billed: what it produced, within the cap the request sent."""
    cap = sent_cap(body)
    return produced if cap is None else min(produced, cap)


def new_bill(model: str | None, path: str, sent: bytes, completion_tokens: int) -> Bill:
    """The bill of a request received now: one prompt token per byte of ``sent``."""
    return Bill(model, path, sent, len(sent), completion_tokens, time.time())


def reported_usage(mode: str, prompt_tokens: int, completion_tokens: int) -> dict[str, Any] | None:
    """The ``usage`` object a metered reply carries (None: no usage field), by ``USAGE_REPORTS`` mode."""
    if mode == "absent":
        return None
    if mode == "string":
        return {
            "prompt_tokens": str(prompt_tokens),
            "completion_tokens": str(completion_tokens),
            "total_tokens": str(prompt_tokens + completion_tokens),
        }
    if mode == "huge":
        return {"prompt_tokens": HUGE_COUNT, "completion_tokens": HUGE_COUNT, "total_tokens": HUGE_COUNT}
    if mode != "exact":
        raise ValueError(f"unknown usage report {mode!r} (one of {USAGE_REPORTS})")
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def nested_value(depth: int) -> bytes:
    """JSON of a list nested ``depth`` deep around one string (orjson cannot write past depth 254)."""
    return b"[" * depth + b'"deep"' + b"]" * depth


def nest(payload: bytes, depth: int | None) -> bytes:
    """``payload`` (an answer's JSON, or one SSE event) with its first ``NEST_MARK`` string and
    every ``finish_reason`` replaced by ``nested_value(depth)``."""
    if depth is None:
        return payload
    nested = nested_value(depth)
    payload = payload.replace(b'"' + NEST_MARK.encode() + b'"', nested, 1)
    return payload.replace(b'"finish_reason":"stop"', b'"finish_reason":' + nested)


def billed_usd(bills: Iterable[Bill], prices: Mapping[str | None, tuple[float, float]]) -> float:
    """USD of ``bills`` at ``prices`` (USD per million (prompt, completion) tokens by upstream model id)."""
    return sum(
        (b.prompt_tokens * prices[b.model][0] + b.completion_tokens * prices[b.model][1]) / 1e6 for b in bills
    )
