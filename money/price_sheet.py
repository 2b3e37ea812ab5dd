"""Price sheets (docs/contracts.md#prices): what one call of each model costs, in USD.

YAML shape::

    models:
      NAME: {input_per_mtok: 0.2, output_per_mtok: 0.6}   # USD per 1M prompt / completion tokens
      OTHER: {per_query_usd: 0.00003}                     # a flat cost per query
      LOCAL: {input_per_mtok: 0.05, output_per_mtok: 0.2, cancel_overrun_tokens: 8}

Each entry is a ``money.Price`` (the gateway config prices models the same way). A model may
carry both forms; the runs loader uses token prices when the runs have token counts, else
``per_query_usd`` (``Price.cost_usd``). ``cancel_overrun_tokens`` is the gateway config's
``models.NAME.cancel_overrun_tokens`` (docs/contracts.md#charges): what calibration charges a
``prefix`` rule's cancelled cheap stage by (``load_cancel_overruns``); absent, its cap.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from money.prices import Price, PriceError, parse_price

# An entry's field beside its price: tokens the model may generate after the gateway cancels it.
OVERRUN_FIELD = "cancel_overrun_tokens"


class PriceSheetError(Exception):
    """A price sheet is unreadable or malformed (one-line message naming the file and entry)."""


def load_price_sheet(path: str | Path) -> dict[str, Price]:
    """Read a price-sheet YAML into ``{model name: Price}``; PriceSheetError on bad input."""
    path = Path(path)
    prices: dict[str, Price] = {}
    for name, entry in _entries(path).items():
        if isinstance(entry, dict):
            entry = {k: v for k, v in entry.items() if k != OVERRUN_FIELD}
        try:
            prices[name] = parse_price(entry, f"{path}: models.{name}")
        except PriceError as exc:
            raise PriceSheetError(str(exc)) from None
    return prices


def load_cancel_overruns(path: str | Path) -> dict[str, int]:
    """``{model name: cancel_overrun_tokens}`` of the sheet's entries that declare one (a
    non-negative integer); PriceSheetError on bad input."""
    path = Path(path)
    overruns: dict[str, int] = {}
    for name, entry in _entries(path).items():
        value = entry.get(OVERRUN_FIELD) if isinstance(entry, dict) else None
        if value is None:
            continue
        if type(value) is not int or value < 0:
            raise PriceSheetError(
                f"{path}: models.{name}.{OVERRUN_FIELD}: expected a count >= 0, got {value!r}"
            )
        overruns[name] = value
    return overruns


def _entries(path: Path) -> dict[str, object]:
    """The sheet's ``models`` mapping, by name."""
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise PriceSheetError(f"{path}: cannot read price sheet ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise PriceSheetError(f"{path}: not valid YAML ({_first_line(exc)})") from exc
    if not isinstance(document, dict) or not isinstance(document.get("models"), dict):
        raise PriceSheetError(f"{path}: a price sheet needs a top-level 'models:' mapping")
    return {str(name): entry for name, entry in document["models"].items()}


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
