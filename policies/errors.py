"""Errors raised by the policy contract package."""


class PolicyError(Exception):
    """Base class of every error raised by ``policies``."""


class PolicyInvalidError(PolicyError):
    """A policy document is unreadable or does not satisfy the schema."""


class UnknownTierError(PolicyError):
    """A request named a tier the policy does not define."""

    def __init__(self, tier: str, known: list[str]):
        super().__init__(f"unknown tier {tier!r}; this policy defines {', '.join(sorted(known))}")
        self.tier = tier
        self.known = known


class UnknownScorerError(PolicyError):
    """A scorer name outside docs/contracts.md#scorers, or ``external`` where it cannot be computed."""


class PriceError(PolicyError, ValueError):
    """A model price is invalid, or cannot price a call (per-token prices, unknown token counts).

    A ValueError too, so pydantic reports it as a validation error of the model holding the price.
    """
