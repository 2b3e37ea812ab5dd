"""The 429s of the keyed path: a spend limit or a rate limit that would be exceeded.

Each error carries ``Retry-After`` (until the spend window, budget period or refusing rate window
ends) and, for a rate-limited key, the ``x-ratelimit-*`` headers of its windows' counts.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from gateway.keys.auth import ClientIdentity
from gateway.keys.budget_periods import SpendWindow
from gateway.keys.ledger import NANO_PER_USD
from gateway.keys.rate_limits import RateState
from gateway.wire.errors import BudgetExceededError, RateLimitExceededError

# Retry-After of a key whose budget never resets: a day (a client retries at most that often).
_NO_RESET_RETRY_S = 24 * 3600


def budget_exceeded(
    identity: ClientIdentity,
    spent: int,
    amount: int,
    win: SpendWindow,
    window_s: int,
    rate: RateState | None,
    now: float,
) -> BudgetExceededError:
    """The 429 of a key whose ``spent`` + ``amount`` nano-USD would pass its limit in ``win``
    (``window_s``: the fixed window's length, for a key without a budget period)."""
    headers = {"Retry-After": str(max(1, math.ceil(win.end - now)))}
    if rate is not None:
        headers.update((k.decode(), v.decode()) for k, v in rate.headers(now))
    if identity.period is None:
        per = f"per {window_s}s window"
        resets = f" The window resets at {_iso(win.end)}."
    elif identity.period.kind == "none":
        per, resets = "(no reset period)", " It does not reset."
        headers["Retry-After"] = str(_NO_RESET_RETRY_S)
    else:
        per = f"per {identity.period.describe()} period"
        resets = f" The period resets at {_iso(win.end)}."
    limit = "none" if identity.limit_usd is None else f"${identity.limit_usd:g}"
    return BudgetExceededError(
        f"Spend limit of {limit} {per} reached for this API key "
        f"(spent or reserved ${spent / NANO_PER_USD:.6f}; this request may cost up to "
        f"${amount / NANO_PER_USD:.6f}).{resets}",
        headers=headers,
    )


def rate_exceeded(state: RateState, tokens: int, now: float) -> RateLimitExceededError:
    """The 429 of a request (``tokens``: its worst case) that a rate window of ``state`` refuses."""
    kind, index = state.refused_by(tokens) or ("requests", 0)
    limit = state.windows.limits[index]
    cap = limit.requests if kind == "requests" else limit.tokens
    used = state.requests[index] if kind == "requests" else state.tokens[index]
    retry_after = state.retry_after_s(index, now)
    headers = {"Retry-After": str(retry_after)}
    headers.update((k.decode(), v.decode()) for k, v in state.headers(now))
    return RateLimitExceededError(
        f"Rate limit reached for this API key on {kind} per {limit.window_s}s: limit {cap}, "
        f"used {used}"
        + (f", this request may use up to {tokens}" if kind == "tokens" else "")
        + f". Retry after {retry_after}s.",
        limit_kind=kind,
        headers=headers,
    )


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat(timespec="seconds")
