"""What one non-streamed upstream call is charged: its reported usage, or a bound when it has none.

An OpenAI-compatible answer reports ``usage.prompt_tokens`` and ``usage.completion_tokens``; the
call is charged the configured price of those. Some servers omit usage (or a count in it). Then a
price with a flat ``per_query_usd`` charges that (docs/contracts.md: the flat form is the price of
a call whose usage is unknown); a price with per-token prices only is charged an estimate that errs
high, never $0: the gateway has no tokenizer, and what it counts must not fall short of what the
upstream bills. The estimate follows the spend reservation's bound (``runtime.reserve_estimate``):
one prompt token per byte of the upstream request, and for the completion the smaller of the
completion cap the request was sent with (per generated choice) and the bytes of the answer's
``choices`` (a token is at least one byte of what it encodes).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.requests import completion_bound, generated_choices
from policies import Price


def reported_counts(usage: Any) -> tuple[int, int] | None:
    """(prompt_tokens, completion_tokens) when ``usage`` reports both as counts, else None."""
    if not isinstance(usage, dict):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if isinstance(prompt, int) and isinstance(completion, int) and _count(prompt) and _count(completion):
        return prompt, completion
    return None


def estimated_counts(sent: bytes, answer: Any) -> tuple[int, int]:
    """Token counts that err high for a call without usage (``sent``: the upstream request bytes)."""
    request = orjson.loads(sent)
    cap = completion_bound(request) * generated_choices(request)
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if choices is None:
        return len(sent), cap
    return len(sent), min(cap, len(orjson.dumps(choices)))


def call_charge(price: Price, usage: Any, sent: bytes, answer: Any) -> tuple[float, int, int]:
    """(USD, prompt tokens, completion tokens) charged for one answered call; the counts are the
    reported or estimated ones (0, 0 when the flat price was charged instead)."""
    counts = reported_counts(usage)
    if counts is None:
        if price.per_query_usd is not None:
            return float(price.per_query_usd), 0, 0
        counts = estimated_counts(sent, answer)
    return float(price.cost_usd(*counts)), counts[0], counts[1]


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
