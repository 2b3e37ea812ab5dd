"""What one call of a model costs, in USD: the one price model of the project.

The gateway config (``models.NAME.price``), the calibration price sheet, ``cascade collect`` and
the local pool manifest all use ``Price``, so a model is priced by the same rule wherever it
appears. Two forms, either or both:

* per token: ``input_per_mtok`` and ``output_per_mtok``, USD per million prompt / completion tokens
  (they come as a pair: a lone one would silently make the other side free);
* per call: ``per_query_usd``, a flat USD per call.

Optional rates refine the per-token form for prompt caching and reasoning (``money.usage``
normalises each provider's usage into these parts): ``cache_read_per_mtok`` (cached input read,
e.g. 0.1x input at Anthropic, 0.1-0.5x at OpenAI), ``cache_write_per_mtok`` (input written to the
cache, 5-minute lifetime: 1.25x at Anthropic), ``cache_write_1h_per_mtok`` (1-hour writes: 2x) and
``reasoning_per_mtok`` (reasoning tokens, part of the output). Each defaults to the rate its tokens
would have without it (input, the 5-minute write rate, output), so a price without them charges
what it always did.

The rule, decided once: a call whose token counts are known costs its tokens at the per-token
prices; a call whose counts are unknown (a runs table without token columns) costs
``per_query_usd``. A model with both forms is therefore priced by tokens wherever counts exist and
by the flat price elsewhere (e.g. ``data/plaut-mc/prices.yaml``, whose runs have no counts).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field, model_validator

from money.usage import Usage


class PriceError(ValueError):
    """A model price is invalid, or cannot price a call (per-token prices, unknown token counts).

    A ValueError, so pydantic reports it as a validation error of the model holding the price.
    """


PRICE_FIELDS = ("input_per_mtok", "output_per_mtok", "per_query_usd")
# Rates for parts of the per-token form (need it); see the module docstring.
PART_FIELDS = ("cache_read_per_mtok", "cache_write_per_mtok", "cache_write_1h_per_mtok", "reasoning_per_mtok")
_TOKENS_PER_MTOK = 1e6

# Token counts: one call's (int/float) or a column of them (calibration prices a whole runs table).
Tokens = TypeVar("Tokens", int, float, NDArray[np.float64])


class Price(BaseModel):
    """USD per million input/output tokens and/or a flat USD per call; see the module docstring."""

    # A typo in a hand-written price must be an error, not a silently free model.
    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_mtok: float | None = Field(None, ge=0, allow_inf_nan=False)
    output_per_mtok: float | None = Field(None, ge=0, allow_inf_nan=False)
    per_query_usd: float | None = Field(None, ge=0, allow_inf_nan=False)
    cache_read_per_mtok: float | None = Field(None, ge=0, allow_inf_nan=False)
    cache_write_per_mtok: float | None = Field(None, ge=0, allow_inf_nan=False)
    cache_write_1h_per_mtok: float | None = Field(None, ge=0, allow_inf_nan=False)
    reasoning_per_mtok: float | None = Field(None, ge=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _valid_forms(self) -> Price:
        _check_forms(self.input_per_mtok, self.output_per_mtok, self.per_query_usd)
        _check_parts(self.input_per_mtok, [getattr(self, name) for name in PART_FIELDS])
        return self

    @property
    def has_token_prices(self) -> bool:
        """True when the per-token form is given (both token prices)."""
        return self.input_per_mtok is not None

    def cost_usd(self, prompt_tokens: Tokens | None, completion_tokens: Tokens | None) -> Tokens | float:
        """USD cost of one call (or of each call, for arrays of counts).

        Known counts (both not None) and per-token prices: tokens x prices. Otherwise the flat
        ``per_query_usd``. Raises PriceError when the price has only the per-token form and the
        counts are unknown.
        """
        known = prompt_tokens is not None and completion_tokens is not None
        if known and self.input_per_mtok is not None and self.output_per_mtok is not None:
            return (
                prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok  # type: ignore[operator]
            ) / _TOKENS_PER_MTOK
        if self.per_query_usd is not None:
            return self.per_query_usd
        raise PriceError("the price has only per-token prices and the call's token counts are unknown")

    def usage_cost_usd(self, usage: Usage) -> float:
        """USD of one call's normalised usage (``money.usage``): each part at its rate
        (``parts_cost_usd``). Without per-token prices, ``per_query_usd``."""
        if self.input_per_mtok is None or self.output_per_mtok is None or not usage.has_parts:
            return float(self.cost_usd(usage.prompt_tokens, usage.completion_tokens))
        return float(self.parts_cost_usd(*usage))

    def parts_cost_usd(
        self,
        prompt_tokens: Tokens,
        completion_tokens: Tokens,
        cache_read: Tokens | int = 0,
        cache_write: Tokens | int = 0,
        cache_write_1h: Tokens | int = 0,
        reasoning: Tokens | int = 0,
    ) -> Tokens | float:
        """USD of a call whose tokens come in parts (a column of calls too), the fields of
        ``money.usage.Usage`` in its order: the totals, the cache reads, 5-minute and 1-hour cache
        writes (parts of the prompt) and the reasoning tokens (part of the completion), each part at
        its rate and the rest of each total at the input or output rate. Without per-token prices,
        ``cost_usd`` of the totals."""
        if self.input_per_mtok is None or self.output_per_mtok is None:
            return self.cost_usd(prompt_tokens, completion_tokens)
        inp, out = self.input_per_mtok, self.output_per_mtok
        write = _or(self.cache_write_per_mtok, inp)
        uncached = prompt_tokens - cache_read - cache_write - cache_write_1h
        total = (
            uncached * inp
            + cache_read * _or(self.cache_read_per_mtok, inp)
            + cache_write * write
            + cache_write_1h * _or(self.cache_write_1h_per_mtok, write)
            + (completion_tokens - reasoning) * out
            + reasoning * _or(self.reasoning_per_mtok, out)
        )
        return total / _TOKENS_PER_MTOK

    def bound_cost_usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        """USD of at most these tokens, however they split into parts: every input token at the
        highest input-side rate, every output token at the highest output-side rate (a worst case
        that a cache write, dearer than plain input, can never pass)."""
        if self.input_per_mtok is None or self.output_per_mtok is None:
            return float(self.cost_usd(prompt_tokens, completion_tokens))
        write = _or(self.cache_write_per_mtok, self.input_per_mtok)
        inp = max(self.input_per_mtok, _or(self.cache_read_per_mtok, 0.0), write)
        inp = max(inp, _or(self.cache_write_1h_per_mtok, write))
        out = max(self.output_per_mtok, _or(self.reasoning_per_mtok, 0.0))
        return (prompt_tokens * inp + completion_tokens * out) / _TOKENS_PER_MTOK

    def describe(self) -> str:
        """The price in a few words, e.g. ``$0.2/$0.6 per Mtok`` or ``$3e-05 per call``."""
        parts = []
        if self.has_token_prices:
            parts.append(f"${self.input_per_mtok:g}/${self.output_per_mtok:g} per Mtok (in/out)")
        if self.per_query_usd is not None:
            parts.append(f"${self.per_query_usd:g} per call")
        return ", ".join(parts)


def parse_price(entry: object, where: str) -> Price:
    """A Price from a hand-written mapping (a price-sheet entry); PriceError naming ``where`` if bad.

    ``where`` locates the entry in messages, e.g. ``prices.yaml: models.small``.
    """
    if not isinstance(entry, Mapping):
        raise PriceError(f"{where}: expected a mapping of prices")
    unknown = sorted(set(map(str, entry)) - set(PRICE_FIELDS) - set(PART_FIELDS))
    if unknown:
        raise PriceError(f"{where}: unknown field(s) {', '.join(unknown)}")
    values: dict[str, float] = {}
    for name, raw in entry.items():
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise PriceError(f"{where}.{name}: not a number ({raw!r})") from None
        if not math.isfinite(value) or value < 0:
            raise PriceError(f"{where}.{name}: must be a finite number >= 0")
        values[str(name)] = value
    try:
        _check_forms(*(values.get(name) for name in PRICE_FIELDS))
        _check_parts(values.get("input_per_mtok"), [values.get(name) for name in PART_FIELDS])
    except PriceError as exc:
        raise PriceError(f"{where}: {exc}") from None
    return Price(**values)


def _check_forms(
    input_per_mtok: float | None, output_per_mtok: float | None, per_query_usd: float | None
) -> None:
    """Raise PriceError unless the values make a valid price (see the module docstring)."""
    if (input_per_mtok is None) != (output_per_mtok is None):
        lone = "input_per_mtok" if output_per_mtok is None else "output_per_mtok"
        raise PriceError(f"price gives only {lone}; per-token prices come as a pair (input and output)")
    if input_per_mtok is None and per_query_usd is None:
        raise PriceError(
            "price needs input_per_mtok and output_per_mtok (USD per million tokens), "
            "per_query_usd (USD per call), or both"
        )


def _check_parts(input_per_mtok: float | None, parts: list[float | None]) -> None:
    """Raise PriceError when a part's rate is given without the per-token form it refines."""
    if input_per_mtok is None and any(rate is not None for rate in parts):
        given = [name for name, rate in zip(PART_FIELDS, parts, strict=True) if rate is not None]
        raise PriceError(
            f"{', '.join(given)} refine per-token prices: give input_per_mtok and output_per_mtok too"
        )


def _or(rate: float | None, default: float) -> float:
    return default if rate is None else rate
