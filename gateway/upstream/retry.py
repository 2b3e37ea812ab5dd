"""When a failed upstream attempt is retried, and after how long (a model's ``RetryPolicy``).

Exponential backoff with full jitter: retry ``n`` (0-based) waits a uniform draw in
``[0, min(cap_s, base_s * 2**n)]``, so replicas that failed together do not retry together. A wait
the upstream asks for (``retry-after-ms``, else ``Retry-After`` in seconds or as an HTTP date;
read by gateway.upstream.failure) replaces the draw when it is at most ``retry_after_cap_s``; a
longer one is not waited at all: the call fails over at once (the next stage, or the client's
error with the upstream's Retry-After).
No retry starts past the request's deadline nor later than ``deadline_s`` after the call's first
attempt. Which failures may be retried at all is the client's rule (gateway.upstream.client).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from gateway.config.fail_over import RetryPolicy

Uniform = Callable[[float, float], float]
"""A draw in ``[a, b]`` (``random.uniform``; tests pass their own)."""


def backoff_delay(policy: RetryPolicy, retry: int, uniform: Uniform = random.uniform) -> float:
    """The full-jitter delay before retry ``retry`` (0 for the first): a draw in
    ``[0, min(cap_s, base_s * 2**retry)]``."""
    return uniform(0.0, min(policy.cap_s, policy.base_s * 2**retry))


def retry_delay(
    policy: RetryPolicy,
    retries_left: int,
    retry: int,
    asked_s: float | None,
    first_at: float,
    deadline: float,
    *,
    now: float,
    uniform: Uniform = random.uniform,
) -> float | None:
    """Seconds to wait before retry ``retry``, or None when the call must fail now.

    ``retries_left``: retries still allowed (``max_retries`` minus those made); ``asked_s``: the
    wait the upstream asked for, if any; ``first_at``, ``deadline`` and ``now`` are
    ``time.monotonic()`` instants (the call's first attempt, the request's deadline, the present).
    """
    if retries_left <= 0:
        return None
    if asked_s is not None:
        if asked_s > policy.retry_after_cap_s:
            return None  # a long wait is better spent on the next stage than on this one
        delay = asked_s
    else:
        delay = backoff_delay(policy, retry, uniform)
    start = now + delay
    if start >= deadline or start > first_at + policy.deadline_s:
        return None
    return delay
