"""The request path's two spend script calls, packed for the batcher with their fixed parts made once.

Every keyed request runs the reservation script and the settlement script (gateway.keys.spend_store).
Most of what they send is the same for every request of a key's window: the script's SHA, the
counter and pending hash names, the epoch key, the limit, the counter lifetime and the epoch, and a
rate-limited key's window hashes and limits. Those runs of bulk strings are packed once per key and
window (``WindowCalls``) and joined with the few that change per request (the operation id and its
cancellation tombstone, the amount, the tokens), so a call costs a join instead of formatting every
argument (``gateway.redis.batch.pack_commands`` formats each one).

The layouts follow the scripts' slots (gateway.keys.spend_store ``_RESERVE_SLOTS`` and the others:
the spend part's keys ``spend_key, pending_key, epoch_key, cancelled_key``, its reserve arguments
``spend_limit, ttl, epoch, amount, op_id``, its finish arguments ``epoch, marker_ttl, cancel, op_id,
actual``, then the rate part's), which spend_store checks against these at import.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.keys.rate_limits import RateWindows
from gateway.redis.batch import LuaScript, bulks, evalsha_head
from gateway.redis.keys import RedisKeys

# The slot names the layouts below assume, in order (spend_store asserts its slots match).
SPEND_KEYS = ("spend_key", "pending_key", "epoch_key", "cancelled_key")
RESERVE_ARGS = ("spend_limit", "ttl", "epoch", "amount", "op_id")
RESERVE_RATE_KEYS, RESERVE_RATE_ARGS = ("rollover_key",), ("rollover_cap", "rate_n", "rate_tokens")
FINISH_ARGS = ("epoch", "marker_ttl", "cancel", "op_id", "actual")
FINISH_RATE_ARGS = ("rate_n", "requests_delta", "tokens_delta")


class WindowCalls:
    """One key's window: its counter and pending hash names, and the packed runs of its calls that
    stay the same while the values they hold do (each rebuilt when one changes)."""

    __slots__ = (
        "finish_fixed",
        "finish_of",
        "keys",
        "pending",
        "rate_keys",
        "rate_keys_of",
        "rated",
        "rated_of",
        "reserve_fixed",
        "reserve_of",
        "spend",
    )

    def __init__(self, spend: str, pending: str, epoch_key: str):
        self.spend, self.pending = spend, pending
        self.keys = bulks(spend, pending, epoch_key)  # the spend part's keys before the tombstone
        self.reserve_of: tuple[int, int, str] | None = None
        self.reserve_fixed = b""
        self.finish_of: tuple[str, int] | None = None
        self.finish_fixed = b""
        self.rated_of: tuple[object, ...] | None = None
        self.rated: tuple[bytes, bytes, bytes, bytes] = (b"", b"", b"", b"")
        self.rate_keys_of: Sequence[str] | None = None
        self.rate_keys = (b"", b"")  # the rated finish's head and window hashes


class SpendCalls:
    """Packs the reservation and settlement calls (the scripts are spend_store's: ``reserve_plain``
    and ``finish_plain`` for a key without rate limits or a budget period, ``reserve`` and ``finish``
    with the rate part)."""

    def __init__(
        self,
        keys: RedisKeys,
        *,
        reserve_plain: LuaScript,
        reserve: LuaScript,
        finish_plain: LuaScript,
        finish: LuaScript,
        marker_ttl_s: int,
    ):
        self._keys = keys
        self._epoch_key = keys.spend_epoch
        self._cancelled = keys.spend_cancelled("")  # + op id: an operation's tombstone
        self._ascii = self._cancelled.isascii()  # else the tombstone is packed as bytes (``bulks``)
        self._reserve, self._finish = reserve, finish
        self._reserve_plain_head = evalsha_head(reserve_plain, len(SPEND_KEYS), len(RESERVE_ARGS))
        self._finish_plain_head = evalsha_head(finish_plain, len(SPEND_KEYS), len(FINISH_ARGS))
        self._marker_ttl_s = marker_ttl_s
        # (key id, window) -> its calls: named and packed once per key and window, not per call.
        self._windows: dict[tuple[str, int], WindowCalls] = {}

    def window(self, key_id: str, window: int) -> WindowCalls:
        """The calls of ``key_id``'s window starting at ``window``."""
        calls = self._windows.get((key_id, window))
        if calls is None:
            if len(self._windows) > 10_000:
                self._windows.clear()  # bounded: one entry per active key and window
            spend = self._keys.spend(key_id, window)
            calls = WindowCalls(spend, self._keys.spend_pending(key_id, window), self._epoch_key)
            self._windows[(key_id, window)] = calls
        return calls

    def _tombstone(self, op_id: str) -> bytes:
        name = self._cancelled + op_id
        return f"${len(name)}\r\n{name}\r\n".encode() if self._ascii else bulks(name)

    def reserve_plain(
        self, calls: WindowCalls, op_id: str, amount: int, limit: int, ttl: int, epoch: str
    ) -> bytes:
        """The reservation of a key without rate limits or a budget period."""
        if calls.reserve_of != (limit, ttl, epoch):
            calls.reserve_of, calls.reserve_fixed = (limit, ttl, epoch), bulks(limit, ttl, epoch)
        digits = str(amount)
        varying = f"${len(digits)}\r\n{digits}\r\n${len(op_id)}\r\n{op_id}\r\n".encode()
        return b"".join(
            (self._reserve_plain_head, calls.keys, self._tombstone(op_id), calls.reserve_fixed, varying)
        )

    def reserve_rated(
        self,
        calls: WindowCalls,
        op_id: str,
        amount: int,
        limit: int,
        ttl: int,
        epoch: str,
        rollover: tuple[str, int],
        windows: RateWindows | None,
        tokens: int,
    ) -> bytes:
        """The reservation with the rate part: ``rollover`` (the previous period's counter, the cap:
        -1 for none), the key's rate ``windows`` and the request's worst-case ``tokens``."""
        of = (windows, rollover, limit, ttl, epoch)
        if calls.rated_of != of:
            window_keys, tail = (windows.keys, windows.args_tail) if windows is not None else ((), [])
            head = evalsha_head(
                self._reserve,
                len(SPEND_KEYS) + len(RESERVE_RATE_KEYS) + len(window_keys),
                len(RESERVE_ARGS) + len(RESERVE_RATE_ARGS) + len(tail),
            )
            # After the tombstone: the rollover key, the window hashes, the spend part's fixed
            # arguments; after the amount and op id: the rate part's; after the tokens, the limits.
            middle = bulks(rollover[0], *window_keys, limit, ttl, epoch)
            calls.rated_of = of
            calls.rated = (head, middle, bulks(rollover[1], len(window_keys)), bulks(*tail))
        head, middle, rate, tail_packed = calls.rated
        digits = str(amount)
        varying = f"${len(digits)}\r\n{digits}\r\n${len(op_id)}\r\n{op_id}\r\n".encode()
        count = str(tokens)
        return b"".join(
            (
                head,
                calls.keys,
                self._tombstone(op_id),
                middle,
                varying,
                rate,
                f"${len(count)}\r\n{count}\r\n".encode(),
                tail_packed,
            )
        )

    def finish(
        self,
        calls: WindowCalls,
        op_id: str,
        actual: int,
        epoch: str,
        cancel: int,
        rate_keys: Sequence[str],
        deltas: tuple[int, int],
    ) -> tuple[LuaScript | None, bytes]:
        """The settlement (``cancel``: 1 leaves a tombstone if nothing is pending), with the rate
        part when there are ``rate_keys`` (``deltas``: requests and tokens to add to each): the
        script (None: the plain one) and the packed call."""
        if calls.finish_of != (epoch, cancel):
            calls.finish_of, calls.finish_fixed = (epoch, cancel), bulks(epoch, self._marker_ttl_s, cancel)
        digits = str(actual)
        varying = f"${len(op_id)}\r\n{op_id}\r\n${len(digits)}\r\n{digits}\r\n".encode()
        if not rate_keys:
            parts = (self._finish_plain_head, calls.keys, self._tombstone(op_id), calls.finish_fixed, varying)
            return None, b"".join(parts)
        if calls.rate_keys_of is not rate_keys:
            head = evalsha_head(
                self._finish, len(SPEND_KEYS) + len(rate_keys), len(FINISH_ARGS) + len(FINISH_RATE_ARGS)
            )
            calls.rate_keys_of, calls.rate_keys = rate_keys, (head, bulks(*rate_keys))
        head, window_keys = calls.rate_keys
        count, requests, tokens = str(len(rate_keys)), str(deltas[0]), str(deltas[1])
        rate = f"${len(count)}\r\n{count}\r\n${len(requests)}\r\n{requests}\r\n${len(tokens)}\r\n{tokens}\r\n"
        tombstone = self._tombstone(op_id)
        rated = (head, calls.keys, tombstone, window_keys, calls.finish_fixed, varying, rate.encode())
        return self._finish, b"".join(rated)
