"""How a live stream ended is what its 200 attempt is charged (``gateway.streaming.live``): every
``Ending`` against its row of docs/contracts.md#charges, through ``ending_attempt`` and the one
charging rule (``money.charges.attempt_charge``)."""

from __future__ import annotations

import pytest

from gateway.streaming.live_call import Ending, StreamTally, ending_attempt
from money import Price
from money.charges import Attempt, attempt_charge, sent_bound

SENT = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100}'
PRICE = Price(input_per_mtok=1.0, output_per_mtok=2.0)
ANSWER = {
    "choices": [{"index": 0, "message": {"content": "hello"}}],
    "usage": {"prompt_tokens": 7, "completion_tokens": 3},
}


def tally(chunks: int, usage: dict[str, int] | None = None) -> StreamTally:
    """A tally that read ``chunks`` output chunks (and a usage, if given)."""
    counted = StreamTally()
    for _ in range(chunks):
        counted.observe({"choices": [{"index": 0, "delta": {"content": "w"}}]})
    if usage is not None:
        counted.observe({"choices": [], "usage": usage})
    return counted


def test_no_200_adds_no_attempt() -> None:
    assert ending_attempt(Ending.UNANSWERED, SENT, tally(0), None) is None


def test_a_whole_json_answer_is_charged_as_the_answer_it_is() -> None:
    assert ending_attempt(Ending.WHOLE, SENT, tally(0), ANSWER) == Attempt(SENT, answer=ANSWER)


@pytest.mark.parametrize("ending", [Ending.CUT_JSON, Ending.BROKEN])
def test_a_cut_json_answer_or_a_stream_broken_without_usage_is_its_worst_case(ending: Ending) -> None:
    attempt = ending_attempt(ending, SENT, tally(4), None)
    assert attempt == Attempt(SENT)
    assert attempt_charge(PRICE, attempt).usd == pytest.approx(sent_bound(PRICE, SENT).usd)


def test_a_complete_stream_is_its_usage_else_its_chunks() -> None:
    assert ending_attempt(Ending.COMPLETE, SENT, tally(4), None) == Attempt(SENT, streamed_tokens=4)
    usage = {"prompt_tokens": 7, "completion_tokens": 4}
    assert ending_attempt(Ending.COMPLETE, SENT, tally(4, usage), None) == Attempt(
        SENT, usage=usage, streamed_tokens=4
    )


@pytest.mark.parametrize("ending", [Ending.REJECTED, Ending.BROKEN])
def test_a_stream_that_reported_its_usage_is_charged_by_it_however_it_ended(ending: Ending) -> None:
    usage = {"prompt_tokens": 7, "completion_tokens": 2}
    assert ending_attempt(ending, SENT, tally(2, usage), None) == Attempt(
        SENT, usage=usage, streamed_tokens=2
    )


def test_a_stream_the_gateway_closed_is_its_chunks_read_plus_the_declared_overrun() -> None:
    attempt = ending_attempt(Ending.REJECTED, SENT, tally(3), None)
    assert attempt == Attempt(SENT, streamed_tokens=3, cancelled=True)
