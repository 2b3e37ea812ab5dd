"""The Keys page's data: per client key, spend against its limit and period, its rate-limit windows,
and the spend over time of the keys that spent most. Ids and names only: never a key's secret.

Every key (the environment's and the Redis hash ``{prefix}:keys``) is ranked by its current window's
counter (one MGET: O(keys)); the ``SHOWN_KEYS`` that spent most are read as ``/v1/me/usage`` reads
one (``SpendLimiter.usages``: limit with rollover, rate windows), in one pipeline. The chart
reads the minute samples one replica writes (gateway.assembly.replica_feed), the current minute's
rewritten from what the page just read: O(minutes x charted keys).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.assembly.replica_feed import KEY_SPEND_KEEP_S
from gateway.keys.auth import Authenticator, ClientIdentity
from gateway.keys.budget_periods import NEVER
from gateway.keys.ledger import NANO_PER_USD, KeyUsage
from gateway.keys.spend import SpendLimiter
from gateway.redis.keys import RedisKeys

# How many keys the spend chart overlays (the ones that spent most in their current window).
CHARTED_KEYS = 6
# How many keys the table shows (the ones that spent most): the page stays small with many keys.
SHOWN_KEYS = 100
# How many minutes of spend samples the chart spans.
CHART_MINUTES = 180


@dataclass
class RateWindowView:
    """One rate-limit window of a key: its length, used and limit of requests and tokens, reset."""

    window_s: int
    requests_used: int
    requests_limit: int | None
    tokens_used: int
    tokens_limit: int | None
    resets_in_s: float


@dataclass
class KeyView:
    """One key's row: id, name, spend against limit in its period, rate windows."""

    key_id: str
    name: str | None
    spent_usd: float
    limit_usd: float | None
    period: str
    period_ends: str | None
    rate_windows: list[RateWindowView]
    source: str

    @property
    def share(self) -> float | None:
        """Spent over limit (None without a USD limit)."""
        return self.spent_usd / self.limit_usd if self.limit_usd else None


@dataclass
class KeysView:
    """The page: every key, and the chart's minutes and each charted key's spend at them."""

    keys: list[KeyView]
    minutes: list[int]
    spend_series: dict[str, list[float | None]]
    total: int  # how many keys exist (the table shows the ``SHOWN_KEYS`` that spent most)


def _period_text(identity: ClientIdentity, window_s: int) -> str:
    period = identity.period
    if period is None:
        return f"fixed {window_s} s window"
    return period.kind if period.timezone == "UTC" else f"{period.kind} ({period.timezone})"


def key_view(identity: ClientIdentity, usage: KeyUsage, window_s: int) -> KeyView:
    """One key's row from its usage view."""
    assert identity.key_id is not None
    rates = []
    state = usage.rate
    if state is not None:
        for i, limit in enumerate(state.windows.limits):
            end = state.windows.starts[i] + limit.window_s
            rates.append(
                RateWindowView(
                    limit.window_s,
                    state.requests[i],
                    limit.requests,
                    state.tokens[i],
                    limit.tokens,
                    round(end - usage.now, 1),
                )
            )
    ends = usage.window.end < NEVER
    return KeyView(
        key_id=identity.key_id,
        name=identity.name,
        spent_usd=usage.spent_nano / NANO_PER_USD,
        limit_usd=None if usage.limit_nano is None else usage.limit_nano / NANO_PER_USD,
        period=_period_text(identity, window_s),
        period_ends=datetime.fromtimestamp(usage.window.end, UTC).isoformat(timespec="minutes")
        if ends
        else None,
        rate_windows=rates,
        source=usage.source,
    )


async def spend_series(
    redis: aioredis.Redis, keys: RedisKeys, key_ids: list[str], now: float, minutes: int = CHART_MINUTES
) -> tuple[list[int], dict[str, list[float | None]]]:
    """The minute starts of the last ``minutes`` minutes and each key's sampled spend (USD) at them
    (None: no sample that minute), one pipeline of HMGETs."""
    last = int(now // 60) * 60
    starts = [last - 60 * i for i in range(minutes - 1, -1, -1)]
    series: dict[str, list[float | None]] = {k: [] for k in key_ids}
    if not key_ids:
        return starts, series
    async with redis.pipeline(transaction=False) as pipe:
        for start in starts:
            pipe.hmget(keys.console_key_spend(start), key_ids)
        rows = await pipe.execute()
    for row in rows:
        for key_id, value in zip(key_ids, row, strict=True):
            series[key_id].append(None if value is None else int(value) / NANO_PER_USD)
    # Minutes before the first sample of any charted key are left out (the chart starts at the data).
    first = next(
        (i for i in range(len(starts)) if any(s[i] is not None for s in series.values())), len(starts)
    )
    return starts[first:], {k: v[first:] for k, v in series.items()}


async def _sample_now(redis: aioredis.Redis, keys: RedisKeys, spent: dict[str, int], now: float) -> None:
    """This minute's spend sample from the counters just read (what the minute's sampler writes),
    so the chart ends at what the table shows."""
    if not spent:
        return
    name = keys.console_key_spend(int(now // 60) * 60)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hset(name, mapping=spent)
        pipe.expire(name, KEY_SPEND_KEEP_S)
        await pipe.execute()


async def _most_spent(
    redis: aioredis.Redis, keys: RedisKeys, spend: SpendLimiter, identities: list[ClientIdentity], now: float
) -> tuple[list[ClientIdentity], dict[str, int]]:
    """The ``SHOWN_KEYS`` identities that spent most in their current window (one MGET of every
    key's counter), and every key's spent nano-USD."""
    names = [keys.spend(i.key_id or "", spend.window(i, now).start) for i in identities]
    values = await redis.mget(names) if names else []
    spent = {i.key_id or "": int(v or 0) for i, v in zip(identities, values, strict=True)}
    ranked = sorted(identities, key=lambda i: (-spent[i.key_id or ""], i.key_id or ""))
    return ranked[:SHOWN_KEYS], spent


async def keys_view(
    authenticator: Authenticator,
    spend: SpendLimiter,
    redis: aioredis.Redis | None,
    keys: RedisKeys,
    window_s: int,
    now: float,
) -> KeysView:
    """The rows of the ``SHOWN_KEYS`` keys that spent most (most first), how many keys exist, and the
    chart of the ``CHARTED_KEYS`` that spent most."""
    stored: dict[str, str] = {}
    if redis is not None:
        try:
            stored = await redis.hgetall(keys.client_keys)  # type: ignore[misc]
        except (RedisError, OSError):
            redis = None  # the environment's keys, as this replica counted them (their ``source``)
    identities = [i for i in authenticator.listed_identities(stored) if i.key_id is not None]
    shown, spent = identities, dict[str, int]()
    if redis is not None:
        shown, spent = await _most_spent(redis, keys, spend, identities, now)
    usages = await spend.usages(shown)
    rows = [key_view(i, u, window_s) for i, u in zip(shown, usages, strict=True)]
    rows.sort(key=lambda row: (-row.spent_usd, row.key_id))
    rows = rows[:SHOWN_KEYS]
    minutes: list[int] = []
    series: dict[str, list[float | None]] = {}
    if redis is not None:
        await _sample_now(redis, keys, spent, now)
        charted = [row.key_id for row in rows[:CHARTED_KEYS]]
        minutes, series = await spend_series(redis, keys, charted, now)
    return KeysView(rows, minutes, series, len(identities))
