"""Price sheets: prices by model and the cancel overrun an entry may declare beside its price."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from money import Price
from money.price_sheet import PriceSheetError, load_cancel_overruns, load_price_sheet

PRICE = {"input_per_mtok": 0.001, "output_per_mtok": 0.2}
STRONG = {"input_per_mtok": 0.15, "output_per_mtok": 0.6}


def test_an_entry_declares_its_cancel_overrun_beside_its_price_and_it_must_be_a_count(tmp_path: Path) -> None:
    sheet = tmp_path / "prices.yaml"
    cheap = json.dumps({**PRICE, "cancel_overrun_tokens": 8})
    sheet.write_text(f"models:\n  cheap: {cheap}\n  strong: {json.dumps(STRONG)}\n")
    assert load_cancel_overruns(sheet) == {"cheap": 8}
    assert load_price_sheet(sheet) == {"cheap": Price(**PRICE), "strong": Price(**STRONG)}
    for bad in (2.5, -1, True, "8"):
        sheet.write_text(f"models:\n  cheap: {json.dumps({**PRICE, 'cancel_overrun_tokens': bad})}\n")
        with pytest.raises(PriceSheetError, match="cancel_overrun_tokens"):
            load_cancel_overruns(sheet)
