"""What a live stage is charged when its stream ends early: StreamTally's count, chunk by chunk, under
the one charging rule (money.charges.call_charge)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.streaming.live_call import StreamTally
from money import Price

PER_TOKEN = Price(input_per_mtok=1.0, output_per_mtok=2.0)
SENT = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "Tell me"}], "stream": True})


def _chat(delta: dict[str, Any], logprobs: Any = None, finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}


def counts(tally: StreamTally, price: Price = PER_TOKEN) -> tuple[int, int]:
    charge = tally.charge(price, SENT)
    return charge.prompt_tokens, charge.completion_tokens


def test_one_token_per_chunk_that_carries_output() -> None:
    tally = StreamTally()
    tally.observe(_chat({"role": "assistant", "content": None}))  # the role chunk: no output
    for word in ("Paris", " is", " lovely"):
        tally.observe(_chat({"content": word}))
    tally.observe(_chat({}, finish="stop"))  # the finish chunk: no output
    assert counts(tally) == (len(SENT), 3)  # no usage arrived: the prompt at its bound
    assert tally.charge(PER_TOKEN, SENT).usd == pytest.approx((len(SENT) * 1.0 + 3 * 2.0) / 1e6)


def test_tool_call_refusal_and_legacy_text_chunks_count() -> None:
    tally = StreamTally()
    tally.observe(_chat({"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]}))
    tally.observe(_chat({"refusal": "no"}))
    tally.observe({"choices": [{"index": 0, "text": "legacy", "finish_reason": None}]})
    tally.observe({"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]})
    assert counts(tally) == (len(SENT), 3)


def test_a_chunk_with_several_logprob_entries_counts_each() -> None:
    tally = StreamTally()
    entries = [{"token": t, "logprob": -0.1} for t in ("a", "b", "c")]
    tally.observe(_chat({"content": "abc"}, logprobs={"content": entries}))
    assert counts(tally) == (len(SENT), 3)


def test_every_choice_of_a_multi_choice_stream_counts() -> None:
    tally = StreamTally()
    tally.observe({"choices": [{"index": i, "delta": {"content": "x"}} for i in range(3)]})
    assert counts(tally) == (len(SENT), 3)


def test_the_upstream_usage_wins_once_it_arrived() -> None:
    tally = StreamTally()
    tally.observe(_chat({"content": "a"}))
    tally.observe({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 7}})
    assert counts(tally) == (12, 7)


def test_usage_that_lags_the_chunks_read_never_lowers_the_count() -> None:
    tally = StreamTally()
    for _ in range(5):
        tally.observe(_chat({"content": "a"}))
    tally.observe({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 2}})
    assert counts(tally) == (12, 5)


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": "12", "completion_tokens": "7"},  # strings are no counts
        {"prompt_tokens": 12},  # a partial usage is no usage
        {"prompt_tokens": 12.0, "completion_tokens": 7},
        {"prompt_tokens": True, "completion_tokens": 7},
    ],
)
def test_usage_without_two_integer_counts_charges_the_prompt_bound(usage: dict[str, Any]) -> None:
    tally = StreamTally()
    tally.observe(_chat({"content": "a"}))
    tally.observe({"choices": [], "usage": usage})
    assert counts(tally) == (len(SENT), 1)


def test_without_usage_a_flat_price_is_charged_like_a_whole_answer() -> None:
    both = Price(input_per_mtok=1.0, output_per_mtok=2.0, per_query_usd=0.01)
    tally = StreamTally()
    tally.observe(_chat({"content": "a"}))
    assert tally.charge(both, SENT).usd == 0.01


def test_malformed_choices_and_usage_are_ignored_not_fatal() -> None:
    tally = StreamTally()
    tally.observe({"choices": "oops", "usage": "none"})
    tally.observe({"choices": ["x", 1]})
    assert counts(tally) == (len(SENT), 0)
