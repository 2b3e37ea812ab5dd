"""Price sheets (DESIGN section 3): what one call of each model costs, in USD.

YAML shape::

    models:
      NAME: {input_per_mtok: 0.2, output_per_mtok: 0.6}   # USD per 1M prompt / completion tokens
      OTHER: {per_query_usd: 0.00003}                     # a flat cost per query

A model may carry both; the runs loader prefers token prices when the runs have token counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import yaml


class PriceSheetError(Exception):
    """A price sheet is unreadable or malformed (one-line message naming the file and entry)."""


@dataclass(frozen=True)
class ModelPrice:
    """Prices of one model: USD per 1M input/output tokens and/or a flat USD per query."""

    input_per_mtok: float | None = None
    output_per_mtok: float | None = None
    per_query_usd: float | None = None

    @property
    def has_token_prices(self) -> bool:
        """True when both per-token prices are given."""
        return self.input_per_mtok is not None and self.output_per_mtok is not None

    def token_cost(self, prompt_tokens: float, completion_tokens: float) -> float:
        """USD cost of one call with these token counts (requires token prices)."""
        assert self.input_per_mtok is not None and self.output_per_mtok is not None
        return (prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok) / 1e6


_FIELDS = ("input_per_mtok", "output_per_mtok", "per_query_usd")


def load_price_sheet(path: str | Path) -> dict[str, ModelPrice]:
    """Read a price-sheet YAML into ``{model name: ModelPrice}``; PriceSheetError on bad input."""
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise PriceSheetError(f"{path}: cannot read price sheet ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise PriceSheetError(f"{path}: not valid YAML ({_first_line(exc)})") from exc
    if not isinstance(document, dict) or not isinstance(document.get("models"), dict):
        raise PriceSheetError(f"{path}: a price sheet needs a top-level 'models:' mapping")
    prices: dict[str, ModelPrice] = {}
    for name, entry in document["models"].items():
        if not isinstance(entry, dict):
            raise PriceSheetError(f"{path}: models.{name}: expected a mapping of prices")
        unknown = sorted(set(entry) - set(_FIELDS))
        if unknown:
            raise PriceSheetError(f"{path}: models.{name}: unknown field(s) {', '.join(unknown)}")
        values: dict[str, float] = {}
        for field, raw in entry.items():
            try:
                value = float(raw)
            except (TypeError, ValueError):
                raise PriceSheetError(f"{path}: models.{name}.{field}: not a number ({raw!r})") from None
            if not math.isfinite(value) or value < 0:
                raise PriceSheetError(f"{path}: models.{name}.{field}: must be a finite number >= 0")
            values[field] = value
        price = ModelPrice(**values)
        if not price.has_token_prices and price.per_query_usd is None:
            raise PriceSheetError(
                f"{path}: models.{name}: needs input_per_mtok and output_per_mtok, or per_query_usd"
            )
        prices[str(name)] = price
    return prices


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
