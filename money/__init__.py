"""Money: what a model's call costs (prices), how usage is read (usage) and what is charged (charges).

``prices`` is the one price model, ``usage`` the one normalisation of a provider's token counts, and
``charges`` the one charging rule: every attempt that may have reached a provider is charged its
usage, else its worst case, and a request's reservation is that worst case; ``price_sheet`` reads
a YAML sheet of prices by model (calibration's ``--prices``, ``cascade demo --prices``). Imports
no other package of the project; the contracts are written out in docs/contracts.md#prices and #charges.
"""

from money.prices import Price, PriceError, parse_price

__all__ = ["Price", "PriceError", "parse_price"]
