"""What a client key may do beyond its USD limit: request and token rate limits, and budget periods.

One model each, shared by the config (``budgets.rate_limits``, ``budgets.period``: the default of
every key), the stored key records (``cascade keys add --rpm/--tpm/--rate-limit/--period``,
gateway.commands.keys) and the authenticator that reads them (gateway.keys.auth):

* ``RateLimit``: at most ``requests`` requests and/or ``tokens`` tokens per fixed window of
  ``window_s`` seconds (aligned to the unix epoch, as the spend window). A key may have several
  (a per-minute and a per-day limit, say); each is enforced (gateway.keys.rate_limits).
* ``BudgetPeriod``: the period the USD limit applies to: ``none`` (never resets), ``daily``,
  ``weekly`` (from Monday) or ``monthly`` (calendar month) in ``timezone``; ``rollover_cap_usd``
  carries a period's unused budget into the next one, up to that amount (gateway.keys.budget_periods).
  A key without one keeps the fixed ``budgets.window_s`` window.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

PeriodKind = Literal["none", "daily", "weekly", "monthly"]
_WINDOW_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class RateLimit(BaseModel):
    """At most ``requests`` requests and ``tokens`` tokens (either may be absent) per ``window_s``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window_s: int = Field(gt=0, le=31 * 86400)
    requests: int | None = Field(None, ge=0)
    tokens: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _limits_something(self) -> RateLimit:
        if self.requests is None and self.tokens is None:
            raise ValueError("a rate limit needs requests, tokens or both")
        return self


class BudgetPeriod(BaseModel):
    """The period a key's USD limit applies to (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: PeriodKind
    timezone: str = "UTC"
    rollover_cap_usd: float | None = Field(None, ge=0, allow_inf_nan=False)

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value[:60]!r} (an IANA name, e.g. Europe/Berlin)") from None
        return value

    @model_validator(mode="after")
    def _rollover_needs_a_period(self) -> BudgetPeriod:
        if self.kind == "none" and self.rollover_cap_usd is not None:
            raise ValueError("rollover needs a period that ends (daily, weekly or monthly)")
        return self

    def describe(self) -> str:
        """e.g. ``monthly (Europe/Berlin), rollover up to $5``."""
        if self.kind == "none":
            return "never resets"
        text = f"{self.kind} ({self.timezone})"
        return text + (f", rollover up to ${self.rollover_cap_usd:g}" if self.rollover_cap_usd else "")


def merge_windows(limits: Sequence[RateLimit]) -> tuple[RateLimit, ...]:
    """One limit per window length (the tightest of each dimension), shortest window first: limits
    of the same length share one window counter (gateway.keys.rate_limits)."""
    merged: dict[int, RateLimit] = {}
    for limit in limits:
        seen = merged.get(limit.window_s)
        if seen is not None:
            limit = RateLimit(
                window_s=limit.window_s,
                requests=_tightest(seen.requests, limit.requests),
                tokens=_tightest(seen.tokens, limit.tokens),
            )
        merged[limit.window_s] = limit
    return tuple(merged[w] for w in sorted(merged))


def parse_rate_limits(value: Any) -> tuple[RateLimit, ...] | None:
    """A key record's ``rate_limits`` (a list of objects), merged per window length, or None when
    absent or invalid (an invalid stored entry never locks a key out: the config default applies,
    as for a missing field)."""
    if not isinstance(value, list):
        return None
    try:
        return merge_windows([RateLimit.model_validate(item) for item in value])
    except ValidationError:
        return None


def _tightest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def parse_period(value: Any) -> BudgetPeriod | None:
    """A key record's ``budget_period`` object, or None when absent or invalid."""
    if not isinstance(value, dict):
        return None
    try:
        return BudgetPeriod.model_validate(value)
    except ValidationError:
        return None


def parse_rate_limit_spec(spec: str) -> RateLimit:
    """``WINDOW:requests=N,tokens=M`` (WINDOW like ``60s``, ``1m``, ``1h``, ``1d``) as a RateLimit;
    ValueError saying what is wrong."""
    window, sep, rest = spec.partition(":")
    match = re.fullmatch(r"(\d+)([smhd]?)", window.strip())
    if not sep or match is None:
        raise ValueError(f"{spec!r}: expected WINDOW:requests=N,tokens=M (WINDOW e.g. 60s, 1m, 1h, 1d)")
    fields: dict[str, Any] = {"window_s": int(match.group(1)) * _WINDOW_UNITS[match.group(2) or "s"]}
    for part in rest.split(","):
        name, eq, number = part.partition("=")
        if not eq or name.strip() not in ("requests", "tokens") or not number.strip().isdigit():
            raise ValueError(f"{spec!r}: expected requests=N and/or tokens=M after the window")
        fields[name.strip()] = int(number)
    try:
        return RateLimit.model_validate(fields)
    except ValidationError as exc:
        raise ValueError(f"{spec!r}: {exc.errors()[0]['msg']}") from None
