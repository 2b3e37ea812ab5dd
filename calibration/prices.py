"""Price sheets (docs/contracts.md#prices): what one call of each model costs, in USD.

YAML shape::

    models:
      NAME: {input_per_mtok: 0.2, output_per_mtok: 0.6}   # USD per 1M prompt / completion tokens
      OTHER: {per_query_usd: 0.00003}                     # a flat cost per query

Each entry is a ``money.Price`` (the gateway config prices models the same way). A model may
carry both forms; the runs loader uses token prices when the runs have token counts, else
``per_query_usd`` (``Price.cost_usd``).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from money import Price, PriceError, parse_price


class PriceSheetError(Exception):
    """A price sheet is unreadable or malformed (one-line message naming the file and entry)."""


def load_price_sheet(path: str | Path) -> dict[str, Price]:
    """Read a price-sheet YAML into ``{model name: Price}``; PriceSheetError on bad input."""
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise PriceSheetError(f"{path}: cannot read price sheet ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise PriceSheetError(f"{path}: not valid YAML ({_first_line(exc)})") from exc
    if not isinstance(document, dict) or not isinstance(document.get("models"), dict):
        raise PriceSheetError(f"{path}: a price sheet needs a top-level 'models:' mapping")
    prices: dict[str, Price] = {}
    for name, entry in document["models"].items():
        try:
            prices[str(name)] = parse_price(entry, f"{path}: models.{name}")
        except PriceError as exc:
            raise PriceSheetError(str(exc)) from None
    return prices


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
