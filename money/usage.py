"""One normalisation step per provider form of ``usage``, so one charging rule prices them all.

Providers report prompt caching and reasoning in two incompatible forms:

* **subset form** (OpenAI chat completions, and every OpenAI-compatible server): ``prompt_tokens``
  is every input token; ``prompt_tokens_details.cached_tokens`` (cache reads) and the cache writes
  some servers report (``prompt_tokens_details.cache_write_tokens``, or LiteLLM's and OpenRouter's
  top-level ``cache_creation_input_tokens``) are *part of* it. ``completion_tokens`` is every output
  token; ``completion_tokens_details.reasoning_tokens`` is part of it. The Responses API's
  ``input_tokens`` with ``input_tokens_details`` is the same form under other names.
* **additive form** (Anthropic Messages): ``input_tokens`` counts only the input that was neither
  read from nor written to the cache; ``cache_read_input_tokens`` and
  ``cache_creation_input_tokens`` come *on top of* it (the writes split by lifetime in
  ``cache_creation.ephemeral_5m_input_tokens`` / ``ephemeral_1h_input_tokens``).

Reading one form as the other is the classic gateway cost bug: cache writes counted twice (once
as input, once as writes), or cache reads billed at the full input rate. ``normalize_usage`` turns
either into one ``Usage`` of disjoint parts, which ``money.prices.Price.usage_cost_usd`` prices
and ``money.charges.call_charge`` charges.

Counts must be non-negative integers (a JSON bool, float or string is no count); a detail that is
not one is read as 0, and a subset larger than its total is cut to the total, so a malformed
detail can never make a call cheaper than its uncached input or negative.
"""

from __future__ import annotations

from typing import Any, NamedTuple, TypeGuard


class Usage(NamedTuple):
    """A call's tokens in disjoint parts (each billed at its own rate).

    ``prompt_tokens`` and ``completion_tokens`` are the totals (what rate limits count and what the
    ``x-cascade-*`` facts and metrics report); the input parts sum to ``prompt_tokens`` and
    ``reasoning_tokens`` is part of ``completion_tokens``. (A tuple: made on every upstream call.)
    """

    prompt_tokens: int
    completion_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0  # 5-minute (default lifetime) writes
    cache_write_1h_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def has_parts(self) -> bool:
        """Whether any token is a cache read or write or reasoning (else only the totals matter)."""
        return bool(self.cache_read_tokens or self.cache_write_tokens or self.cache_write_1h_tokens) or bool(
            self.reasoning_tokens
        )

    @property
    def uncached_prompt_tokens(self) -> int:
        """Input tokens billed at the plain input rate."""
        return (
            self.prompt_tokens - self.cache_read_tokens - self.cache_write_tokens - self.cache_write_1h_tokens
        )

    def with_completion(self, completion_tokens: int) -> Usage:
        """The same usage with ``completion_tokens`` (e.g. raised to the stream chunks seen)."""
        return Usage(
            self.prompt_tokens,
            completion_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
            self.cache_write_1h_tokens,
            min(self.reasoning_tokens, completion_tokens),
        )


def normalize_usage(usage: Any) -> Usage | None:
    """The ``Usage`` of a provider's usage object in either form (see the module docstring), or
    None when it carries no integer totals (then the call is charged without counts)."""
    if not isinstance(usage, dict):
        return None
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        return _subset_form(usage, "prompt_tokens", "completion_tokens", "prompt_tokens_details")
    if "input_tokens_details" in usage or "output_tokens_details" in usage:
        return _subset_form(usage, "input_tokens", "output_tokens", "input_tokens_details")
    if "input_tokens" in usage or "output_tokens" in usage:
        return _additive_form(usage)
    return None


def _subset_form(
    usage: dict[str, Any], prompt_key: str, completion_key: str, details_key: str
) -> Usage | None:
    prompt, completion = usage.get(prompt_key), usage.get(completion_key)
    if not (is_count(prompt) and is_count(completion)):
        return None
    raw_details = usage.get(details_key)
    plain = raw_details is None and "cache_creation_input_tokens" not in usage
    if plain and "completion_tokens_details" not in usage and "output_tokens_details" not in usage:
        return Usage(prompt, completion)  # the common case: totals only
    details = _mapping(raw_details)
    out_details = _mapping(usage.get("completion_tokens_details") or usage.get("output_tokens_details"))
    read = _count(details.get("cached_tokens"))
    write = _count(details.get("cache_write_tokens")) or _count(details.get("cache_creation_tokens"))
    write = write or _count(usage.get("cache_creation_input_tokens"))
    read = min(read, prompt)
    write = min(write, prompt - read)
    reasoning = min(_count(out_details.get("reasoning_tokens")), completion)
    return Usage(prompt, completion, read, write, 0, reasoning)


def _additive_form(usage: dict[str, Any]) -> Usage | None:
    uncached, completion = usage.get("input_tokens"), usage.get("output_tokens")
    if not (is_count(uncached) and is_count(completion)):
        return None
    read = _count(usage.get("cache_read_input_tokens"))
    write = _count(usage.get("cache_creation_input_tokens"))
    split = _mapping(usage.get("cache_creation"))
    write_1h = min(_count(split.get("ephemeral_1h_input_tokens")), write)
    write_5m = write - write_1h
    return Usage(uncached + read + write, completion, read, write_5m, write_1h, 0)


def is_count(value: Any) -> TypeGuard[int]:
    """A non-negative integer that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def positive_int(value: Any) -> int:
    """``value`` if it is a positive integer (a JSON bool is not one), else 0: the one reading of a
    count field that must be positive (a cap, ``n``, ``top_logprobs``, a reported token count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _count(value: Any) -> int:
    return value if is_count(value) else 0


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
