"""Golden prices of real usage objects in both provider forms: cached input as a subset of the prompt
(OpenAI) and cache reads and writes on top of the input (Anthropic), reasoning billed as output.

The usage objects are the ones the providers return (copied from their documentation and from
public bug reports whose bill is known); the expected dollars are computed by hand from the
providers' published rates.
"""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from money import Price, PriceError, parse_price
from money.charges import call_charge, reported_counts
from money.usage import Usage, normalize_usage, positive_int

SENT = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'

# Claude 3.7 Sonnet: $3 input, $3.75 5-minute cache write, $6 1-hour write, $0.30 cache read, $15 output.
SONNET = Price(
    input_per_mtok=3.0,
    output_per_mtok=15.0,
    cache_read_per_mtok=0.30,
    cache_write_per_mtok=3.75,
    cache_write_1h_per_mtok=6.0,
)
# gpt-4o: $2.50 input, $1.25 cached input, $10 output.
GPT_4O = Price(input_per_mtok=2.5, output_per_mtok=10.0, cache_read_per_mtok=1.25)
# o1: $15 input, $7.50 cached input, $60 output (reasoning tokens are output tokens).
O1 = Price(input_per_mtok=15.0, output_per_mtok=60.0, cache_read_per_mtok=7.5)


def test_anthropic_cache_writes_are_charged_once_not_also_as_input() -> None:
    """The usage of a prompt-cache write as Anthropic's Messages API returned it; Anthropic billed
    $0.05439 (cache write $0.04614, output $0.00825, input $0.000009), where a gateway reading the
    writes as part of the input too reported $0.091311 (LiteLLM #9812)."""
    usage = {
        "input_tokens": 3,
        "cache_creation_input_tokens": 12304,
        "cache_read_input_tokens": 0,
        "output_tokens": 550,
    }
    charge = call_charge(SONNET, usage, SENT)
    assert charge.usd == pytest.approx(3 * 3e-6 + 12304 * 3.75e-6 + 550 * 15e-6)
    assert charge.usd == pytest.approx(0.054399, abs=1e-9)
    assert abs(charge.usd - 0.05439) < 1e-5 and abs(charge.usd - 0.091311) > 0.03
    assert (charge.prompt_tokens, charge.completion_tokens) == (12307, 550)
    assert charge.cache_write_tokens == 12304 and charge.cache_read_tokens == 0


def test_anthropic_cache_reads_are_charged_at_the_read_rate_on_top_of_the_input() -> None:
    usage = {
        "input_tokens": 21,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 188086,
        "output_tokens": 393,
    }
    charge = call_charge(SONNET, usage, SENT)
    assert charge.usd == pytest.approx((21 * 3 + 188086 * 0.30 + 393 * 15) / 1e6)
    assert charge.prompt_tokens == 21 + 188086 and charge.cache_read_tokens == 188086


def test_anthropic_one_hour_writes_are_charged_at_their_own_rate() -> None:
    usage = {
        "input_tokens": 10,
        "cache_creation_input_tokens": 3000,
        "cache_read_input_tokens": 500,
        "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 2000},
        "output_tokens": 100,
    }
    expected = (10 * 3 + 500 * 0.30 + 1000 * 3.75 + 2000 * 6.0 + 100 * 15) / 1e6
    assert call_charge(SONNET, usage, SENT).usd == pytest.approx(expected)


def test_openai_cached_tokens_are_a_subset_of_the_prompt_tokens() -> None:
    """OpenAI's prompt-caching example: 1,920 of the 2,006 prompt tokens were read from the cache."""
    usage = {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    charge = call_charge(GPT_4O, usage, SENT)
    assert charge.usd == pytest.approx(((2006 - 1920) * 2.5 + 1920 * 1.25 + 300 * 10) / 1e6)
    assert charge.usd == pytest.approx(0.005615)
    assert (charge.prompt_tokens, charge.completion_tokens, charge.cache_read_tokens) == (2006, 300, 1920)


def test_openai_reasoning_tokens_are_part_of_the_completion_and_billed_as_output() -> None:
    """OpenAI's reasoning example: 1,024 of the 1,843 completion tokens were reasoning."""
    usage = {
        "prompt_tokens": 9,
        "completion_tokens": 1843,
        "total_tokens": 1852,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 1024},
    }
    charge = call_charge(O1, usage, SENT)
    assert charge.usd == pytest.approx((9 * 15 + 1843 * 60) / 1e6)  # not 1843 + 1024 output tokens
    assert charge.reasoning_tokens == 1024 and charge.completion_tokens == 1843


def test_a_separate_reasoning_rate_prices_only_the_reasoning_part() -> None:
    price = Price(input_per_mtok=1.0, output_per_mtok=4.0, reasoning_per_mtok=8.0)
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 50,
        "completion_tokens_details": {"reasoning_tokens": 20},
    }
    assert call_charge(price, usage, SENT).usd == pytest.approx((100 * 1 + 30 * 4 + 20 * 8) / 1e6)


def test_litellm_chat_form_with_anthropic_cache_keys_counts_them_inside_prompt_tokens() -> None:
    """A chat-form usage where prompt_tokens already holds the cache reads and writes (with
    Anthropic's key names beside it): the subset form, so nothing is counted twice."""
    usage = {
        "total_tokens": 103925,
        "prompt_tokens": 98805,
        "completion_tokens": 5120,
        "prompt_tokens_details": {"cached_tokens": 66360, "cache_creation_tokens": 32435},
        "cache_read_input_tokens": 66360,
        "completion_tokens_details": {"reasoning_tokens": 1710},
        "cache_creation_input_tokens": 32435,
    }
    normal = normalize_usage(usage)
    assert normal == Usage(98805, 5120, 66360, 32435, 0, 1710)
    assert normal.uncached_prompt_tokens == 10
    expected = (10 * 3 + 66360 * 0.30 + 32435 * 3.75 + 5120 * 15) / 1e6
    assert call_charge(SONNET, usage, SENT).usd == pytest.approx(expected)


def test_a_responses_api_usage_is_the_subset_form() -> None:
    usage = {
        "input_tokens": 2006,
        "input_tokens_details": {"cached_tokens": 1920},
        "output_tokens": 300,
        "output_tokens_details": {"reasoning_tokens": 100},
    }
    assert normalize_usage(usage) == Usage(2006, 300, 1920, 0, 0, 100)


def test_a_price_without_part_rates_charges_what_it_always_did() -> None:
    plain = Price(input_per_mtok=2.5, output_per_mtok=10.0)
    usage = {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "prompt_tokens_details": {"cached_tokens": 1920},
    }
    assert call_charge(plain, usage, SENT).usd == pytest.approx(float(plain.cost_usd(2006, 300)))


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 10, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 99}},
        {"prompt_tokens": 10, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": "9"}},
        {"prompt_tokens": 10, "completion_tokens": 5, "prompt_tokens_details": [1]},
        {"prompt_tokens": 10, "completion_tokens": 5, "completion_tokens_details": {"reasoning_tokens": 50}},
    ],
)
def test_a_malformed_detail_never_makes_a_call_cheaper_than_its_uncached_part_or_negative(
    usage: dict,
) -> None:
    normal = normalize_usage(usage)
    assert normal is not None and normal.uncached_prompt_tokens >= 0
    assert 0 <= normal.reasoning_tokens <= normal.completion_tokens
    assert call_charge(GPT_4O, usage, SENT).usd >= 10 * 1.25e-6 + 5 * 10e-6 - 1e-15


@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": "3", "output_tokens": 5},
        {"input_tokens": 3},
        {"input_tokens": 3.0, "output_tokens": 5, "cache_read_input_tokens": 7},
        {"cache_read_input_tokens": 7},
    ],
)
def test_anthropic_form_without_integer_totals_is_no_count(usage: dict) -> None:
    assert normalize_usage(usage) is None and reported_counts(usage) is None


def test_the_worst_case_prices_every_input_token_at_the_dearest_input_rate() -> None:
    # A prompt written to a 1-hour cache costs 2x input: the bound must cover it.
    assert SONNET.bound_cost_usd(1000, 10) == pytest.approx((1000 * 6.0 + 10 * 15) / 1e6)


def test_part_rates_need_the_per_token_form() -> None:
    with pytest.raises(ValidationError, match="cache_read_per_mtok"):
        Price(per_query_usd=0.01, cache_read_per_mtok=0.1)
    with pytest.raises(PriceError, match="cache_write_per_mtok"):
        parse_price({"per_query_usd": 0.01, "cache_write_per_mtok": 1}, "prices.yaml: models.x")
    assert (
        parse_price(
            {"input_per_mtok": 3, "output_per_mtok": 15, "cache_read_per_mtok": 0.3}, "x"
        ).cache_read_per_mtok
        == 0.3
    )


def test_a_column_of_calls_is_priced_as_each_call_by_its_usage() -> None:
    """Calibration prices a runs table's columns with the formula the gateway charges one call by."""
    calls = [Usage(1000, 100), Usage(1000, 100, 300, 200, 100, 0), Usage(50, 400, 0, 0, 50, 0)]
    columns = np.array(list(zip(*calls, strict=True)), dtype=np.float64)
    each = [SONNET.usage_cost_usd(u) for u in calls]
    assert SONNET.parts_cost_usd(*columns).tolist() == pytest.approx(each)
    assert SONNET.parts_cost_usd(10**6, 0, 0, 0, 10**6) == pytest.approx(6.0)  # 1-hour writes: their rate


@pytest.mark.parametrize(
    ("value", "read"), [(5, 5), (1, 1), (0, 0), (-3, 0), (True, 0), (2.0, 0), ("5", 0), (None, 0)]
)
def test_a_positive_count_is_a_positive_integer_and_nothing_else(value: object, read: int) -> None:
    assert positive_int(value) == read
