"""Per-key request and token rate limits, checked in the spend reservation's own Redis script.

A key's ``RateLimit``s (gateway.config.key_settings) are fixed windows aligned to the unix epoch: window
``w`` of a limit of ``window_s`` seconds is the hash ``{prefix}:rate:{key_id}:{window_s}:{start}``
with the fields ``r`` (requests admitted) and ``t`` (tokens: reserved worst case at admission,
settled to the real count after), expiring with its window. The window's start is part of the
name, so nothing resets them: a new window is a new key.

**Admission** (all windows at once, atomically, in the same script and round trip as the spend
reservation, gateway.keys.spend_store): a request is admitted when, in every window, ``r + 1 <= requests``
and ``t < tokens`` (room is left); then each window gets ``r += 1`` and ``t += `` the request's
worst-case tokens. So a window's requests never pass its limit, and its tokens pass it by at most
one request's worst case (the one admitted last), however many replicas admit concurrently. At
settlement the tokens become the real count (``t += actual - reserved``), in the windows the
request was admitted in. A refused request changes nothing.

**Headers** (``RateState.headers``), on every answer of a rate-limited key, as OpenAI's API sends
them: ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` of the binding window (the least
remaining, after this request); ``reset`` is the time until that window ends (``1s``, ``6m0s``).
A refusal is a 429 with ``Retry-After`` (whole seconds until the refusing window ends).

The script fragments here are composed with the spend scripts in gateway.keys.spend_store, and
both parts read their arguments by name (``gateway.redis.batch.ScriptSlots``): the spend part's
slots, then this part's (``RESERVE_RATE_SLOTS``, ``FINISH_RATE_SLOTS``), then one hash per window
in ``KEYS`` and (on reserve) three arguments per window in ``ARGV``. Without Redis, and during a
Redis outage, ``LocalRateCounter`` applies the same rule in process (per replica), counting on from
what Redis last returned for each window (gateway.keys.outage).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from gateway.config.key_settings import RateLimit
from gateway.redis.batch import ScriptSlots
from gateway.redis.keys import RedisKeys
from gateway.wire.exchange import Headers

# Counters outlive their window a little so a late settlement still finds them.
_TTL_MARGIN_S = 60

# Reserve side: this part's slots, after the spend part's. ``rollover_key``: the previous period's
# spend counter (rollover, gateway.keys.budget_periods); ``rollover_cap``: the most of its unused
# limit carried over, in nano-USD (-1: none); ``rate_tokens``: the request's worst-case tokens;
# ``rate_n``: the window count. After the fixed slots: one hash per window (KEYS), and its
# requests limit, tokens limit (-1: no limit) and ttl (ARGV).
RESERVE_RATE_SLOTS = ScriptSlots(keys=("rollover_key",), args=("rollover_cap", "rate_n", "rate_tokens"))
# Reads the spend part's ``spend_limit`` (a rollover raises it before the spend part reads it) and,
# to report a refusal, its ``spend_key``.
RESERVE_PRELUDE = """
local windows = tonumber(rate_n)
local carried = tonumber(rollover_cap)
if carried >= 0 then
  local base = tonumber(spend_limit)
  local unused = base - tonumber(redis.call('GET', rollover_key) or '0')
  if unused < 0 then unused = 0 end
  if unused > carried then unused = carried end
  spend_limit = string.format('%.0f', base + unused)
end
local function rate_counts()
  local counts = {}
  for i = 1, windows do
    local c = redis.call('HMGET', KEYS[keys_end + i], 'r', 't')
    counts[2 * i - 1] = tonumber(c[1] or '0')
    counts[2 * i] = tonumber(c[2] or '0')
  end
  return counts
end
local function rate_admits(counts)
  for i = 1, windows do
    local requests = tonumber(ARGV[args_end + 3 * i - 2])
    local tokens = tonumber(ARGV[args_end + 3 * i - 1])
    if requests >= 0 and counts[2 * i - 1] + 1 > requests then return false end
    if tokens >= 0 and counts[2 * i] >= tokens then return false end
  end
  return true
end
local function rate_add(counts)
  for i = 1, windows do
    local key = KEYS[keys_end + i]
    counts[2 * i - 1] = redis.call('HINCRBY', key, 'r', 1)
    counts[2 * i] = redis.call('HINCRBY', key, 't', rate_tokens)
    if redis.call('TTL', key) < 0 then redis.call('EXPIRE', key, tonumber(ARGV[args_end + 3 * i])) end
  end
end
"""

# Runs the spend part (``spend_reserve``, returning {status, spent}) only if the rate limits admit,
# counts the request only if the spend part admitted it, and appends the counts of each window.
RESERVE_MAIN = """
local counts = rate_counts()
local reply
if rate_admits(counts) then
  reply = spend_reserve()
  if reply[1] == 1 then rate_add(counts) end
else
  reply = {-3, redis.call('GET', spend_key) or '0'}
end
for i = 1, #counts do reply[#reply + 1] = counts[i] end
return reply
"""

# Settle side: this part's slots, after the spend part's (the tokens and requests to add to each
# window, the window count), then one hash per window (KEYS). Applied only when the spend part
# settled a pending reservation (returned 1): once per request.
FINISH_RATE_SLOTS = ScriptSlots(args=("rate_n", "requests_delta", "tokens_delta"))
FINISH_MAIN = """
local result = spend_finish()
if result == 1 then
  for i = 1, tonumber(rate_n) do
    local key = KEYS[keys_end + i]
    if redis.call('EXISTS', key) == 1 then
      if redis.call('HINCRBY', key, 't', tokens_delta) < 0 then redis.call('HSET', key, 't', 0) end
      if requests_delta ~= '0' and redis.call('HINCRBY', key, 'r', requests_delta) < 0 then
        redis.call('HSET', key, 'r', 0)
      end
    end
  end
end
return result
"""

RATE_REFUSED = -3
_REQUEST_HEADERS = (
    b"x-ratelimit-limit-requests",
    b"x-ratelimit-remaining-requests",
    b"x-ratelimit-reset-requests",
)
_TOKEN_HEADERS = (b"x-ratelimit-limit-tokens", b"x-ratelimit-remaining-tokens", b"x-ratelimit-reset-tokens")


class RateWindows:
    """The current window of each of a key's rate limits, for the requests until one of them ends
    (``RateWindows.at`` reuses them: names, script arguments and header inputs are made once per
    window, not per request)."""

    __slots__ = (
        "args_tail",
        "begins",
        "ends",
        "expires",
        "keys",
        "limits",
        "request_caps",
        "starts",
        "token_caps",
    )

    _cache: ClassVar[dict[tuple[str, str], RateWindows]] = {}

    def __init__(self, limits: tuple[RateLimit, ...], starts: tuple[int, ...], keys: tuple[str, ...]):
        self.limits = limits
        self.starts = starts
        self.keys = keys  # Redis hash of each window
        self.ends = tuple(start + limit.window_s for limit, start in zip(limits, starts, strict=True))
        self.begins, self.expires = max(starts), min(self.ends)  # every window contains [begins, expires)
        self.request_caps = tuple(limit.requests for limit in limits)
        self.token_caps = tuple(limit.tokens for limit in limits)
        # Per window: requests limit, tokens limit (-1: none), TTL (the window and a margin: set once,
        # when the window's hash is created).
        self.args_tail: list[int] = []
        for limit in limits:
            self.args_tail += [
                _or_none(limit.requests),
                _or_none(limit.tokens),
                limit.window_s + _TTL_MARGIN_S,
            ]

    @classmethod
    def at(cls, limits: tuple[RateLimit, ...], now: float, key_id: str, keys: RedisKeys) -> RateWindows:
        """The windows containing ``now`` (cached per key and limits until the first one ends)."""
        # Keyed by name, checked by identity: hashing and comparing the limits (pydantic models) would
        # cost more than making the windows; a key's limits are one tuple while its record is cached.
        slot = (keys.prefix, key_id)
        cached = cls._cache.get(slot)
        if cached is not None and cached.limits is limits and cached.begins <= now < cached.expires:
            return cached
        if len(cls._cache) > 10_000:
            cls._cache.clear()  # bounded: one entry per active key
        starts = tuple(int(now // lim.window_s) * lim.window_s for lim in limits)
        names = tuple(keys.rate(key_id, lim.window_s, s) for lim, s in zip(limits, starts, strict=True))
        windows = cls._cache[slot] = cls(limits, starts, names)
        return windows

    def args(self, tokens: int, now: float) -> list[int]:
        """The script's per-window ARGV (after the fixed slots): requests limit, tokens limit, ttl."""
        return self.args_tail


@dataclass(slots=True)
class RateState:
    """Counts of each window after a request's admission (or at its refusal)."""

    windows: RateWindows
    requests: list[int]
    tokens: list[int]

    @classmethod
    def from_reply(cls, windows: RateWindows, tail: Sequence[int]) -> RateState:
        """From the counts the script appended: (requests, tokens) per window."""
        return cls(windows, [int(x) for x in tail[0::2]], [int(x) for x in tail[1::2]])

    def refused_by(self, tokens: int) -> tuple[str, int] | None:
        """(``requests`` or ``tokens``, window index) of the first limit refusing one more request
        of ``tokens`` worst-case tokens at these counts, or None."""
        for i, limit in enumerate(self.windows.limits):
            if limit.requests is not None and self.requests[i] + 1 > limit.requests:
                return "requests", i
            if limit.tokens is not None and self.tokens[i] >= limit.tokens:
                return "tokens", i
        return None

    def headers(self, now: float) -> Headers:
        """``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` of the binding windows (the
        least remaining; among those, the one ending last)."""
        out: Headers = []
        windows = self.windows
        for names, caps, counts in (
            (_REQUEST_HEADERS, windows.request_caps, self.requests),
            (_TOKEN_HEADERS, windows.token_caps, self.tokens),
        ):
            best_cap = best_left = best_end = -1
            for i, cap in enumerate(caps):
                if cap is None:
                    continue
                left = cap - counts[i]
                left = left if left > 0 else 0
                end = windows.ends[i]
                if best_cap < 0 or left < best_left or (left == best_left and end > best_end):
                    best_cap, best_left, best_end = cap, left, end
            if best_cap >= 0:
                out.append((names[0], b"%d" % best_cap))
                out.append((names[1], b"%d" % best_left))
                out.append((names[2], duration(best_end - now).encode()))
        return out

    def retry_after_s(self, index: int, now: float) -> int:
        """Whole seconds until window ``index`` ends (at least 1)."""
        return max(1, math.ceil(self.windows.ends[index] - now))


class RateTally:
    """What one replica knows of one rate window: Redis's counts as last returned (``seen_*``), what
    it admitted in process since (``local_*``, not in Redis yet) and its write-backs in flight."""

    __slots__ = ("end", "local_r", "local_t", "seen_r", "seen_t", "sending", "ttl_s")

    def __init__(self, end: float, ttl_s: int):
        self.seen_r = self.seen_t = self.local_r = self.local_t = 0
        self.sending: dict[str, tuple[int, int]] = {}  # op id -> (requests, tokens)
        self.end, self.ttl_s = end, ttl_s

    def own(self) -> tuple[int, int]:
        """(requests, tokens) this replica admitted that Redis's last counts do not hold."""
        r, t = self.local_r, self.local_t
        for sent_r, sent_t in self.sending.values():
            r, t = r + sent_r, t + sent_t
        return r, t


@dataclass(slots=True)
class LocalRateCounter:
    """The admission rule in process: one replica without Redis, or each replica while Redis cannot
    decide, counting on from the counts Redis last returned for each window plus its own admissions
    since, within ``share`` of the headroom Redis left (gateway.keys.outage). What it admitted is
    written back to Redis when it answers (``to_write_back``, ``written_back``)."""

    counts: dict[str, RateTally] = field(default_factory=dict)  # window key -> tally

    def saw(self, state: RateState) -> None:
        """Redis's counts of the windows after a reservation (admitted or refused)."""
        counts, windows = self.counts, state.windows
        for i, key in enumerate(windows.keys):
            tally = counts.get(key)
            if tally is None:
                tally = counts[key] = RateTally(windows.ends[i], windows.args_tail[3 * i + 2])
            tally.seen_r, tally.seen_t = state.requests[i], state.tokens[i]

    def admit(
        self, windows: RateWindows, tokens: int, now: float, share: float = 1.0
    ) -> tuple[bool, RateState]:
        """Admit and count one request of ``tokens`` worst-case tokens; (admitted, counts)."""
        tallies = self._tallies(windows, now)
        state = _state_of(windows, tallies)
        for i, limit in enumerate(windows.limits):
            seen_r, seen_t = tallies[i].seen_r, tallies[i].seen_t
            # This replica's own count since Redis's, against its share of the headroom Redis left.
            own_r, own_t = state.requests[i] - seen_r, state.tokens[i] - seen_t
            if limit.requests is not None and own_r + 1 > math.floor(share * max(0, limit.requests - seen_r)):
                return False, state
            if limit.tokens is not None and own_t >= math.floor(share * max(0, limit.tokens - seen_t)):
                return False, state
        for i, tally in enumerate(tallies):
            tally.local_r += 1
            tally.local_t += tokens
            state.requests[i] += 1
            state.tokens[i] += tokens
        return True, state

    def counts_of(self, windows: RateWindows, now: float) -> RateState:
        """The windows' counts as this replica knows them (nothing admitted)."""
        return _state_of(windows, self._tallies(windows, now))

    def undo(self, windows: RateWindows, tokens: int) -> None:
        """Take back an admission (its request was refused by the spend limit after all)."""
        for key in windows.keys:
            tally = self.counts.get(key)
            if tally is not None:
                tally.local_r, tally.local_t = max(0, tally.local_r - 1), max(0, tally.local_t - tokens)

    def settle(self, keys: Sequence[str], tokens_delta: int) -> None:
        """Replace reserved tokens by the real count in the windows still counted."""
        for key in keys:
            tally = self.counts.get(key)
            if tally is not None:
                tally.local_t = max(0, tally.local_t + tokens_delta)

    def to_write_back(self, now: float, new_id: Callable[[], str]) -> list[tuple[str, str, RateTally]]:
        """(window key, op id, tally) of every write-back to send: what each live window admitted
        in process moves to its ``sending`` under a new id (once; an unanswered one is resent)."""
        out: list[tuple[str, str, RateTally]] = []
        for key, tally in list(self.counts.items()):
            if tally.end <= now:
                if not tally.sending:
                    del self.counts[key]  # over: its count no longer decides anything
                continue
            if (tally.local_r or tally.local_t) and not tally.sending:
                tally.sending[new_id()] = (tally.local_r, tally.local_t)
                tally.local_r = tally.local_t = 0
            out.extend((key, op_id, tally) for op_id in tally.sending)
        return out

    @staticmethod
    def written_back(tally: RateTally, op_id: str) -> None:
        """Redis holds write-back ``op_id`` now: its counts are part of what Redis said."""
        r, t = tally.sending.pop(op_id)
        tally.seen_r, tally.seen_t = tally.seen_r + r, tally.seen_t + t

    def forget_redis(self) -> None:
        """Redis lost its data: nothing it said holds, and every write-back is to be sent again."""
        for tally in self.counts.values():
            tally.local_r, tally.local_t = tally.own()
            tally.sending.clear()
            tally.seen_r = tally.seen_t = 0

    def unsynced(self) -> bool:
        """Whether some window holds admissions Redis does not have yet."""
        return any(t.local_r or t.local_t or t.sending for t in self.counts.values())

    def _tallies(self, windows: RateWindows, now: float) -> list[RateTally]:
        if len(self.counts) > 64 and any(t.end <= now and not t.sending for t in self.counts.values()):
            self.counts = {k: t for k, t in self.counts.items() if t.end > now or t.sending}
        counts, tallies = self.counts, []
        for i, key in enumerate(windows.keys):
            tally = counts.get(key)
            if tally is None:
                tally = counts[key] = RateTally(windows.ends[i], windows.args_tail[3 * i + 2])
            tallies.append(tally)
        return tallies


def _state_of(windows: RateWindows, tallies: list[RateTally]) -> RateState:
    own = [t.own() for t in tallies]
    return RateState(
        windows,
        [t.seen_r + o[0] for t, o in zip(tallies, own, strict=True)],
        [t.seen_t + o[1] for t, o in zip(tallies, own, strict=True)],
    )


def duration(seconds: float) -> str:
    """A reset time as OpenAI writes it: ``850ms``, ``1s``, ``59.5s``, ``6m0s``, ``1h2m3s``."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    if seconds < 60:
        return f"{round(seconds, 3):g}s"
    whole = math.ceil(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return (f"{hours}h" if hours else "") + f"{minutes}m{secs}s"


def _or_none(value: int | None) -> int:
    return -1 if value is None else value
