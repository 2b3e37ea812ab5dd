"""The one charging rule (money/charges.py): what a call is charged, what a request may cost.

Unit rules first, then properties over generated request bodies (charge_support.py): against an
honest upstream, a call's charge never exceeds its bound, and an answer without usage is never
charged less than the upstream bills.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from charge_support import honest_usage, honoured_caps, request_bodies
from hypothesis import given, settings
from hypothesis import strategies as st

from money import Price
from money.charges import (
    DEFAULT_COMPLETION_BOUND,
    TEMPLATE_TOKENS,
    Attempt,
    CallLimits,
    Charge,
    attempt_charge,
    bound_usd,
    call_charge,
    cancelled_stream_charge,
    completion_bound,
    completion_tokens_bound,
    prompt_count,
    prompt_tokens_bound,
    reported_counts,
    sent_bound,
    total_charge,
)

PER_TOKEN = Price(input_per_mtok=0.1, output_per_mtok=0.2)
BOTH = Price(input_per_mtok=0.1, output_per_mtok=0.2, per_query_usd=0.003)
SENT = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16})
ANSWER = {"choices": [{"message": {"role": "assistant", "content": "Hello there"}}]}
PRICES = [
    PER_TOKEN,
    BOTH,
    Price(per_query_usd=0.002),
    Price(input_per_mtok=3.0, output_per_mtok=15.0),
]


# -- the worst case --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "bound"),
    [
        ({"max_tokens": 10, "n_predict": -1}, DEFAULT_COMPLETION_BOUND),  # llama.cpp: -1 is unbounded
        ({"max_tokens": 10, "n_predict": "50"}, DEFAULT_COMPLETION_BOUND),  # not a number: no cap
        ({"max_tokens": 9000, "n_predict": 0}, 9000),
        ({"max_tokens": 10, "max_completion_tokens": 20}, 20),
    ],
)
def test_a_cap_field_set_to_no_positive_number_counts_as_uncapped(body: dict[str, Any], bound: int) -> None:
    assert completion_bound(body) == bound


@pytest.mark.parametrize(
    ("prompt", "count"),
    [
        ("one", 1),
        ([1, 2, 3], 1),  # one token array
        (["a", "b", "c"], 3),
        ([[1, 2], [3], []], 3),
        (["a", 5, "b"], 2),  # a mixed list: its strings
    ],
)
def test_every_prompt_of_a_list_is_a_separate_completion(prompt: Any, count: int) -> None:
    assert prompt_count({"prompt": prompt}) == count
    body = {"prompt": prompt, "max_tokens": 50, "n": 2, "best_of": 3}
    assert completion_tokens_bound(body) == 50 * 3 * count


def test_tools_and_response_format_add_the_template_allowance() -> None:
    assert prompt_tokens_bound({"messages": []}, 100) == 100
    assert prompt_tokens_bound({"tools": [{"type": "function"}]}, 100) == 100 + TEMPLATE_TOKENS
    assert prompt_tokens_bound({"response_format": {"type": "json_object"}}, 100) == 100 + TEMPLATE_TOKENS


def test_the_bound_is_the_flat_price_when_larger() -> None:
    assert bound_usd(BOTH, 10, 10) == 0.003
    assert bound_usd(BOTH, 10**6, 0) == pytest.approx(0.1)
    assert bound_usd(Price(per_query_usd=0.5), 10**9, 10**9) == 0.5


# -- the charge ------------------------------------------------------------------------------------


def test_reported_usage_is_charged_at_the_token_prices() -> None:
    charge = call_charge(PER_TOKEN, {"prompt_tokens": 7, "completion_tokens": 3}, SENT, answer=ANSWER)
    assert (charge.usd, charge.prompt_tokens, charge.completion_tokens) == (
        pytest.approx((7 * 0.1 + 3 * 0.2) / 1e6),
        7,
        3,
    )


@pytest.mark.parametrize(
    "usage",
    [
        None,
        {},
        {"prompt_tokens": 7},
        {"prompt_tokens": True, "completion_tokens": 3},
        {"prompt_tokens": "7", "completion_tokens": "3"},
        {"prompt_tokens": 7.0, "completion_tokens": 3},
        {"prompt_tokens": -1, "completion_tokens": 3},
        "7",
    ],
)
def test_missing_partial_or_non_integer_usage_is_not_a_count(usage: object) -> None:
    assert reported_counts(usage) is None


def test_without_usage_a_per_token_price_charges_an_estimate_that_errs_high() -> None:
    charge = call_charge(PER_TOKEN, None, SENT, answer=ANSWER)
    assert charge.prompt_tokens == len(SENT)  # one token per byte of the upstream request
    assert charge.completion_tokens == min(16, len(orjson.dumps(ANSWER["choices"])))  # the cap here
    assert charge.usd == pytest.approx((len(SENT) * 0.1 + 16 * 0.2) / 1e6) and charge.usd > 0


def test_without_usage_a_short_answer_is_bounded_by_its_bytes_not_the_cap() -> None:
    sent = orjson.dumps({"model": "m", "prompt": "Hi", "max_tokens": 4096, "n": 2})
    answer = {"choices": [{"text": "4"}, {"text": "5"}]}
    charge = call_charge(PER_TOKEN, None, sent, answer=answer)
    answer_bytes = len(orjson.dumps(answer["choices"]))
    assert (charge.prompt_tokens, charge.completion_tokens) == (len(sent), answer_bytes)


def test_without_usage_a_flat_price_is_charged_when_the_price_has_one() -> None:
    assert call_charge(BOTH, None, SENT, answer=ANSWER).usd == 0.003
    assert call_charge(BOTH, None, SENT, streamed_tokens=40).usd == 0.003  # a stream alike
    counted = call_charge(BOTH, {"prompt_tokens": 7, "completion_tokens": 3}, SENT, answer=ANSWER)
    assert (counted.prompt_tokens, counted.completion_tokens) == (7, 3)


def test_string_counts_charge_the_same_rule_streamed_or_not() -> None:
    usage = {"prompt_tokens": "12", "completion_tokens": "3"}
    whole = call_charge(PER_TOKEN, usage, SENT, answer=ANSWER)
    streamed = call_charge(PER_TOKEN, usage, SENT, streamed_tokens=3)
    assert whole.prompt_tokens == streamed.prompt_tokens == len(SENT)  # the prompt bound, never 0
    assert streamed.completion_tokens == 3


# -- properties ------------------------------------------------------------------------------------


def _answer(sent: dict[str, Any], completion_tokens: int, per_token_bytes: int) -> dict[str, Any]:
    """An answer of ``completion_tokens`` tokens of ``per_token_bytes`` bytes each, in one choice."""
    return {"choices": [{"index": 0, "text": "x" * (completion_tokens * per_token_bytes)}]}


@settings(max_examples=300, deadline=None)
@given(request=request_bodies(), price=st.sampled_from(PRICES), data=st.data())
def test_an_honest_calls_charge_never_exceeds_its_bound(
    request: tuple[str, dict[str, Any]], price: Price, data: st.DataObject
) -> None:
    _, body = request
    sent = orjson.dumps(body)
    honoured = data.draw(st.sampled_from(honoured_caps(body)))
    prompt, completion = honest_usage(body, honoured)
    # The upstream may use less than its most, never more.
    used = (data.draw(st.integers(0, prompt)), data.draw(st.integers(0, completion)))
    true_usd = float(price.cost_usd(*used))
    bound = sent_bound(price, sent)
    reported = call_charge(price, {"prompt_tokens": used[0], "completion_tokens": used[1]}, sent)
    assert reported.usd == pytest.approx(true_usd)
    assert true_usd <= bound.usd * (1 + 1e-12)
    # Without usage: never below what was used (a token is at least one byte), never above the bound.
    silent = call_charge(price, None, sent, answer=_answer(body, used[1], data.draw(st.integers(1, 4))))
    assert true_usd <= silent.usd * (1 + 1e-12) and silent.usd <= bound.usd * (1 + 1e-12)


@settings(max_examples=200, deadline=None)
@given(request=request_bodies())
def test_the_completion_bound_covers_whichever_set_cap_the_upstream_honours(
    request: tuple[str, dict[str, Any]],
) -> None:
    _, body = request
    for honoured in honoured_caps(body):
        assert honest_usage(body, honoured)[1] <= completion_tokens_bound(body)


# Prices with rates for the parts of a call's tokens (money.usage): cheaper cache reads, dearer
# cache writes, a separate reasoning rate.
PART_PRICES = [
    Price(input_per_mtok=3.0, output_per_mtok=15.0, cache_read_per_mtok=0.3, cache_write_per_mtok=3.75),
    Price(
        input_per_mtok=3.0,
        output_per_mtok=15.0,
        cache_read_per_mtok=0.3,
        cache_write_per_mtok=3.75,
        cache_write_1h_per_mtok=6.0,
        per_query_usd=0.0001,
    ),
    Price(input_per_mtok=2.5, output_per_mtok=10.0, cache_read_per_mtok=1.25, reasoning_per_mtok=12.0),
]


def _split(data: st.DataObject, total: int, parts: int) -> list[int]:
    """``total`` cut into ``parts`` non-negative integers (drawn)."""
    cuts = sorted(data.draw(st.integers(0, total)) for _ in range(parts - 1))
    return [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]


def _part_usd(price: Price, parts: list[int], output: int, reasoning: int) -> float:
    """The price of the parts, written out independently of Price.usage_cost_usd."""
    uncached, read, write_5m, write_1h = parts
    inp, out = price.input_per_mtok or 0.0, price.output_per_mtok or 0.0
    read_rate = price.cache_read_per_mtok if price.cache_read_per_mtok is not None else inp
    write_rate = price.cache_write_per_mtok if price.cache_write_per_mtok is not None else inp
    write_1h_rate = price.cache_write_1h_per_mtok if price.cache_write_1h_per_mtok is not None else write_rate
    reasoning_rate = price.reasoning_per_mtok if price.reasoning_per_mtok is not None else out
    usd = uncached * inp + read * read_rate + write_5m * write_rate + write_1h * write_1h_rate
    return (usd + (output - reasoning) * out + reasoning * reasoning_rate) / 1e6


@settings(max_examples=300, deadline=None)
@given(request=request_bodies(), price=st.sampled_from(PART_PRICES), data=st.data())
def test_cached_and_reasoning_tokens_are_charged_by_their_rates_and_never_pass_the_bound(
    request: tuple[str, dict[str, Any]], price: Price, data: st.DataObject
) -> None:
    """An honest upstream's usage with cache reads, cache writes and reasoning, reported in the
    subset form (OpenAI) and the additive form (Anthropic): both are charged the same, by the rate of
    each part, and never above the call's bound, whatever share of the prompt the cache wrote."""
    _, body = request
    sent = orjson.dumps(body)
    honoured = data.draw(st.sampled_from(honoured_caps(body)))
    most_prompt, most_completion = honest_usage(body, honoured)
    prompt, completion = data.draw(st.integers(0, most_prompt)), data.draw(st.integers(0, most_completion))
    uncached, read, write_5m, write_1h = _split(data, prompt, 4)
    reasoning = data.draw(st.integers(0, completion))
    subset = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": read, "cache_write_tokens": write_5m + write_1h},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }
    additive = {
        "input_tokens": uncached,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": write_5m + write_1h,
        "cache_creation": {"ephemeral_5m_input_tokens": write_5m, "ephemeral_1h_input_tokens": write_1h},
        "output_tokens": completion,
    }
    bound = sent_bound(price, sent)
    by_subset, by_additive = call_charge(price, subset, sent), call_charge(price, additive, sent)
    # The subset form names no 1-hour writes: they are 5-minute writes there.
    assert by_subset.usd == pytest.approx(
        _part_usd(price, [uncached, read, write_5m + write_1h, 0], completion, reasoning)
    )
    assert by_additive.usd == pytest.approx(
        _part_usd(price, [uncached, read, write_5m, write_1h], completion, 0)
    )
    assert (by_subset.prompt_tokens, by_subset.completion_tokens) == (prompt, completion)
    assert (by_additive.prompt_tokens, by_additive.completion_tokens) == (prompt, completion)
    assert max(by_subset.usd, by_additive.usd) <= bound.usd * (1 + 1e-12)
    # A stream that delivered more chunks than its usage says is charged the chunks.
    streamed = call_charge(price, subset, sent, streamed_tokens=completion + 1)
    assert streamed.completion_tokens == completion + 1 and streamed.reasoning_tokens <= completion + 1


@settings(max_examples=300, deadline=None)
@given(
    request=request_bodies(),
    price=st.sampled_from(PRICES),
    overrun=st.one_of(st.none(), st.integers(0, 64)),
    data=st.data(),
)
def test_a_stream_the_gateway_closed_is_charged_its_chunks_and_declared_overrun_within_its_worst_case(
    request: tuple[str, dict[str, Any]], price: Price, overrun: int | None, data: st.DataObject
) -> None:
    _, body = request
    sent = orjson.dumps(body)
    limits = CallLimits(cancel_overrun_tokens=overrun)
    bound = sent_bound(price, sent, limits)
    read = data.draw(st.integers(0, bound.completion_tokens))
    charged = attempt_charge(price, Attempt(sent, streamed_tokens=read, cancelled=True), limits)
    assert charged.usd <= bound.usd * (1 + 1e-12)
    if overrun is None or not price.has_token_prices:  # undeclared: what it generated is unknown
        assert charged.usd == pytest.approx(bound.usd)
        return
    # A provider that stopped within the declared overrun billed at most what is charged.
    generated = min(bound.completion_tokens, read + data.draw(st.integers(0, overrun)))
    assert price.cost_usd(bound.prompt_tokens, generated) <= charged.usd * (1 + 1e-12)
    # A usage the stream reported before the close is charged as reported, cancelled or not.
    usage = {"prompt_tokens": 3, "completion_tokens": read}
    reported = attempt_charge(price, Attempt(sent, usage=usage, streamed_tokens=read, cancelled=True), limits)
    assert reported == call_charge(price, usage, sent, streamed_tokens=read)


def test_a_cancelled_stream_is_charged_the_same_from_its_numbers_as_from_its_request() -> None:
    """The numbers a caller without the request has (its size, the chunks read, the declared
    overrun, the cap) charge what the request itself is charged: template tokens and choices too."""
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 40, "n": 2}
    for extra, tools in ((0, {}), (TEMPLATE_TOKENS, {"tools": [{"type": "function"}]})):
        sent = orjson.dumps({**body, **tools})
        for overrun in (None, 5, 500):
            limits = CallLimits(cancel_overrun_tokens=overrun)
            by_request = attempt_charge(PER_TOKEN, Attempt(sent, streamed_tokens=7, cancelled=True), limits)
            by_numbers = cancelled_stream_charge(
                PER_TOKEN, len(sent), 7, overrun, 40, extra_prompt_tokens=extra, choices=2
            )
            assert by_numbers == by_request
    assert cancelled_stream_charge(PER_TOKEN, 100, 7, 5, 40).completion_tokens == 12
    assert cancelled_stream_charge(PER_TOKEN, 100, 7, None, 40).completion_tokens == 40
    assert cancelled_stream_charge(BOTH, 100, 7, 5, 40).usd == 0.003  # the flat price, larger


def test_the_total_of_several_attempts_sums_every_amount_and_count() -> None:
    first, second = Charge(0.5, 10, 2, 4, 1, 1), Charge(0.25, 3, 1, 0, 2, 0)
    assert total_charge([first, second]) == Charge(0.75, 13, 3, 4, 3, 1)
    assert total_charge([first]) is first
    assert total_charge([]) == Charge(0.0, 0, 0)
