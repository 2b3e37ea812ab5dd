"""The one price model: its two forms, the rule between them, and one-line errors for bad entries."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from money import Price, PriceError, parse_price


def test_per_token_price_costs_tokens_times_prices() -> None:
    price = Price(input_per_mtok=1.0, output_per_mtok=2.0)
    assert price.cost_usd(1000, 500) == pytest.approx((1000 * 1.0 + 500 * 2.0) / 1e6)
    assert price.has_token_prices


def test_per_query_price_is_flat_whatever_the_tokens() -> None:
    price = Price(per_query_usd=0.01)
    assert price.cost_usd(10**6, 10**6) == 0.01
    assert price.cost_usd(None, None) == 0.01
    assert not price.has_token_prices


def test_both_forms_use_tokens_when_counts_are_known_and_the_flat_price_when_not() -> None:
    price = Price(input_per_mtok=1.0, output_per_mtok=2.0, per_query_usd=9.0)
    assert price.cost_usd(1000, 500) == pytest.approx(0.002)
    assert price.cost_usd(None, None) == 9.0
    assert price.cost_usd(1000, None) == 9.0  # half-known counts are unknown counts


def test_token_only_price_cannot_price_a_call_without_counts() -> None:
    with pytest.raises(PriceError, match="token counts are unknown"):
        Price(input_per_mtok=1.0, output_per_mtok=1.0).cost_usd(None, None)


def test_counts_may_be_a_column_of_calls() -> None:
    price = Price(input_per_mtok=1.0, output_per_mtok=2.0)
    cost = price.cost_usd(np.array([1000.0, 0.0]), np.array([500.0, 10.0]))
    assert cost.tolist() == pytest.approx([0.002, 0.00002])


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({}, "price needs"),
        ({"input_per_mtok": 1.0}, "pair"),
        ({"output_per_mtok": 1.0, "per_query_usd": 1.0}, "pair"),
        ({"per_query_usd": -1.0}, "greater than or equal to 0"),
        ({"per_query_usd": float("inf")}, "finite"),
        ({"per_query_usd": 1.0, "currency": "EUR"}, "Extra inputs"),
    ],
)
def test_invalid_prices_are_rejected(fields: dict[str, float], fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment):
        Price(**fields)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"per_query_usd": "free"}, "sheet: models.a.per_query_usd: not a number ('free')"),
        ({"per_query_usd": -1}, "sheet: models.a.per_query_usd: must be a finite number >= 0"),
        ({"per_query": 1}, "sheet: models.a: unknown field(s) per_query"),
        ({"input_per_mtok": 1}, "sheet: models.a: price gives only input_per_mtok"),
        ({}, "sheet: models.a: price needs input_per_mtok and output_per_mtok"),
        ([1, 2], "sheet: models.a: expected a mapping of prices"),
    ],
)
def test_parse_price_names_the_entry_and_field(entry: object, message: str) -> None:
    with pytest.raises(PriceError) as info:
        parse_price(entry, "sheet: models.a")
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_parse_price_accepts_numbers_written_as_text() -> None:
    assert parse_price({"per_query_usd": "0.5"}, "x") == Price(per_query_usd=0.5)


def test_describe_names_every_form() -> None:
    both = Price(input_per_mtok=0.2, output_per_mtok=0.6, per_query_usd=3e-05)
    assert both.describe() == "$0.2/$0.6 per Mtok (in/out), $3e-05 per call"
