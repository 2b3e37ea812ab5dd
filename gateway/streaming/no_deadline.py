"""A first-token deadline that is not there: ``asyncio.timeout(None)``'s interface without its cost.

A stream's relay (gateway.streaming.live) bounds the wait for a model's first token with
``asyncio.timeout`` when the model declares ``first_token_timeout_s``. Most models declare none,
and an ``asyncio.timeout(None)`` entered and left still costs a few microseconds a stream (the
current task looked up, its cancellation count read and checked): ``NO_DEADLINE`` does nothing.
"""

from __future__ import annotations


class NoDeadline:
    """What ``asyncio.timeout(None)`` does (nothing), without its bookkeeping. Stateless: one
    instance serves every stream."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None

    def when(self) -> float | None:
        """No deadline: None, as ``asyncio.Timeout.when``."""
        return None

    def reschedule(self, when: float | None) -> None:
        """Nothing to move (the relay only ever clears the deadline)."""

    def expired(self) -> bool:
        """Never expires."""
        return False


NO_DEADLINE = NoDeadline()
