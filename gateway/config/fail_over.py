"""How a model's calls fail over: its retry policy and its circuit breaker (docs/contracts.md#faults).

* ``RetryPolicy`` (``models.<name>.retry``): exponential backoff with full jitter, a delay drawn
  from ``[0, min(cap_s, base_s * 2**attempt)]`` (gateway.upstream.retry), an upstream's
  ``retry-after-ms`` / ``Retry-After`` honoured up to ``retry_after_cap_s`` (a longer wait is not
  waited: the call fails over at once), every retry within ``deadline_s`` of the call's first
  attempt, and ``uncertain``: whether an attempt whose bill is uncertain (the connection reset after
  the request was sent, before a byte of an answer) is retried. Such an attempt is charged its worst
  case, so a model that retries it reserves ``max_retries + 1`` worst cases of a call.
* ``BreakerPolicy`` (``models.<name>.breaker``): the circuit breaker of the model
  (gateway.upstream.breaker): open after ``failures`` consecutive failed calls or a failure rate of
  ``failure_rate`` over ``window_s`` (at least ``min_calls`` calls), skipped while open, one probe
  let through after ``open_s``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RetryPolicy(BaseModel):
    """A model's retry schedule (``max_retries`` beside it says how many)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_s: float = Field(
        0.5, gt=0, description="backoff base: retry n waits a uniform draw in [0, min(cap_s, base_s * 2**n)]"
    )
    cap_s: float = Field(8.0, gt=0, description="largest backoff draw bound, seconds")
    retry_after_cap_s: float = Field(
        10.0,
        ge=0,
        description="longest retry-after-ms / Retry-After waited; a longer one fails over at once",
    )
    deadline_s: float = Field(
        20.0, gt=0, description="no retry starts later than this after the call's first attempt"
    )
    uncertain: bool = Field(
        False,
        description="retry an attempt reset after its request was sent, before any answer byte "
        "(charged its worst case; the reservation then holds max_retries + 1 worst cases)",
    )


class BreakerPolicy(BaseModel):
    """When a model's circuit opens, and for how long (``failures: 0`` and ``failure_rate: null``:
    never)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    failures: int = Field(5, ge=0, description="consecutive failed calls that open it; 0: not counted")
    failure_rate: float | None = Field(
        0.5, gt=0, le=1, description="share of failed calls over window_s that opens it; null: not used"
    )
    window_s: float = Field(30.0, gt=0, description="the failure rate's window, seconds")
    min_calls: int = Field(20, ge=1, description="calls in the window before its rate counts")
    open_s: float = Field(30.0, gt=0, description="how long it stays open before one probe goes through")

    @property
    def enabled(self) -> bool:
        """Whether anything can open it."""
        return self.failures > 0 or self.failure_rate is not None
