"""What a non-streamed call is charged when its answer reports no usage (gateway/usage.py).

Unit rules, then through the app with the official SDK: a per-token-priced model whose upstream
omits usage is charged an estimate at or above what the upstream bills, never $0.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest
from scripted_upstream import ok

from gateway.usage import call_charge, estimated_counts, reported_counts
from policies import Price

PER_TOKEN = Price(input_per_mtok=0.1, output_per_mtok=0.2)
SENT = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16})
ANSWER = {"choices": [{"message": {"role": "assistant", "content": "Hello there"}}]}


def test_reported_usage_is_charged_at_the_token_prices() -> None:
    usage = {"prompt_tokens": 7, "completion_tokens": 3}
    assert call_charge(PER_TOKEN, usage, SENT, ANSWER) == (pytest.approx((7 * 0.1 + 3 * 0.2) / 1e6), 7, 3)


@pytest.mark.parametrize(
    "usage", [None, {}, {"prompt_tokens": 7}, {"prompt_tokens": True, "completion_tokens": 3}, "7"]
)
def test_missing_or_partial_usage_is_not_a_count(usage: object) -> None:
    assert reported_counts(usage) is None


def test_without_usage_a_per_token_price_charges_an_estimate_that_errs_high() -> None:
    prompt, completion = estimated_counts(SENT, ANSWER)
    assert prompt == len(SENT)  # one token per byte of the upstream request
    assert completion == min(16, len(orjson.dumps(ANSWER["choices"])))  # the cap, here the smaller
    cost, *_ = call_charge(PER_TOKEN, None, SENT, ANSWER)
    assert cost == pytest.approx((prompt * 0.1 + completion * 0.2) / 1e6) and cost > 0


def test_without_usage_a_short_answer_is_bounded_by_its_bytes_not_the_cap() -> None:
    sent = orjson.dumps({"model": "m", "prompt": "Hi", "max_tokens": 4096, "n": 2})
    answer = {"choices": [{"text": "4"}, {"text": "5"}]}
    assert estimated_counts(sent, answer) == (len(sent), len(orjson.dumps(answer["choices"])))


def test_without_usage_a_flat_price_is_charged_when_the_price_has_one() -> None:
    both = Price(input_per_mtok=0.1, output_per_mtok=0.2, per_query_usd=0.003)
    assert call_charge(both, None, SENT, ANSWER) == (0.003, 0, 0)
    assert call_charge(both, {"prompt_tokens": 7, "completion_tokens": 3}, SENT, ANSWER)[1:] == (7, 3)


def test_an_answer_without_usage_is_charged_no_less_than_the_upstream_bills(
    start_gateway: Callable, upstream
) -> None:
    upstream.set_default("up-small", ok("Paris", confidence=0.99, usage=None))
    running = start_gateway()
    raw = running.client().chat.completions.with_raw_response.create(
        model="cascade", messages=[{"role": "user", "content": "Capital of France?"}], max_tokens=8
    )
    assert raw.headers["x-cascade-models-called"] == "small"
    assert raw.parse().usage is None  # the client sees what the upstream sent
    (billed,) = upstream.produced
    billed_usd = (billed.prompt_tokens * 0.1 + billed.completion_tokens * 0.2) / 1e6
    charged = float(raw.headers["x-cascade-cost-usd"])
    assert charged >= billed_usd > 0
    (call,) = upstream.calls("up-small")
    sent_bytes = len(orjson.dumps(call.body))
    assert charged <= (sent_bytes * 2 * 0.1 + 8 * 0.2) / 1e6  # the reservation's bound, roughly
