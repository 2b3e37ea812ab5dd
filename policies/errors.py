"""Errors raised by the policy contract package."""

# How much of a client-supplied name or value an error message quotes: enough to recognize it, while
# a 60 KB header or model name is never echoed back in full.
QUOTED_CHARS = 40


def quoted(value: str, limit: int = QUOTED_CHARS) -> str:
    """``value`` quoted for an error message: its repr, cut to ``limit`` characters (and says so)."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"


class PolicyError(Exception):
    """Base class of every error raised by ``policies``."""


class PolicyInvalidError(PolicyError):
    """A policy document is unreadable or does not satisfy the schema."""


class UnknownTierError(PolicyError):
    """A request named a tier the policy does not define."""

    def __init__(self, tier: str, known: list[str]):
        super().__init__(f"unknown tier {quoted(tier)}; this policy defines {', '.join(sorted(known))}")
        self.tier = tier
        self.known = known


class UnknownScorerError(PolicyError):
    """A scorer name outside docs/contracts.md#scorers, or ``external`` where it cannot be computed."""
