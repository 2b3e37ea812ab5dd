"""Slowing down key guessing: per-address counts of refused client keys (bounded memory).

An address (the client's host, whatever its port: ``gateway.keys.client_address``) whose requests
were refused for their key ``limit`` times within ``window_s`` seconds has every further refused key
answered 429 ``too_many_auth_failures`` (with a ``Retry-After`` of the rest of the window) instead of
401, until that window ends. The throttle judges only keys that failed: a key is always checked,
and one that is valid is served whatever its address's count, so clients behind the same NAT, proxy
or SNAT as a guesser keep working, and nobody can lock a client out by sending wrong keys under its
address (``Authenticator.authenticate``).

Fixed windows per address, at most ``max_addresses`` tracked: expired ones are dropped first,
then the oldest (an attacker rotating addresses only evicts itself).
"""

from __future__ import annotations

import time
from collections.abc import Callable


class AuthFailureThrottle:
    """Counts refused keys per address in fixed windows; says how long an address is held off."""

    __slots__ = ("_clock", "_entries", "limit", "max_addresses", "window_s")

    def __init__(
        self,
        limit: int,
        window_s: float,
        *,
        max_addresses: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ):
        """``limit`` refusals per ``window_s`` seconds per address (0: never held off)."""
        self.limit = limit
        self.window_s = window_s
        self.max_addresses = max_addresses
        self._clock = clock
        self._entries: dict[str, list[float]] = {}  # host -> [window start, refusals in it]

    def held_off_s(self, host: str | None) -> float:
        """Seconds ``host`` is still held off (0.0: it is not)."""
        if host is None or self.limit <= 0:
            return 0.0
        entry = self._entries.get(host)
        if entry is None or entry[1] < self.limit:
            return 0.0
        left = entry[0] + self.window_s - self._clock()
        return left if left > 0 else 0.0

    def refused(self, host: str | None) -> None:
        """Count one refused key from ``host``."""
        if host is None or self.limit <= 0:
            return
        now = self._clock()
        entry = self._entries.get(host)
        if entry is not None and now - entry[0] < self.window_s:
            entry[1] += 1
            return
        if entry is None and len(self._entries) >= self.max_addresses:
            self._evict(now)
        self._entries[host] = [now, 1.0]

    def _evict(self, now: float) -> None:
        expired = [h for h, (start, _) in self._entries.items() if now - start >= self.window_s]
        for host in expired:
            del self._entries[host]
        while len(self._entries) >= self.max_addresses:
            del self._entries[next(iter(self._entries))]  # the oldest window first (insertion order)

    def __len__(self) -> int:
        return len(self._entries)
