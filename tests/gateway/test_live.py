"""What a live stage is charged when its stream ends early: StreamTally's rule, chunk by chunk."""

from __future__ import annotations

from typing import Any

from gateway.live import StreamTally


def _chat(delta: dict[str, Any], logprobs: Any = None, finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}


def test_one_token_per_chunk_that_carries_output() -> None:
    tally = StreamTally(prompt_bound=300)
    tally.observe(_chat({"role": "assistant", "content": None}))  # the role chunk: no output
    for word in ("Paris", " is", " lovely"):
        tally.observe(_chat({"content": word}))
    tally.observe(_chat({}, finish="stop"))  # the finish chunk: no output
    assert tally.tokens() == (300, 3)  # no usage arrived: the prompt at its bound


def test_tool_call_refusal_and_legacy_text_chunks_count() -> None:
    tally = StreamTally(prompt_bound=10)
    tally.observe(_chat({"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]}))
    tally.observe(_chat({"refusal": "no"}))
    tally.observe({"choices": [{"index": 0, "text": "legacy", "finish_reason": None}]})
    tally.observe({"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]})
    assert tally.tokens() == (10, 3)


def test_a_chunk_with_several_logprob_entries_counts_each() -> None:
    tally = StreamTally(prompt_bound=10)
    entries = [{"token": t, "logprob": -0.1} for t in ("a", "b", "c")]
    tally.observe(_chat({"content": "abc"}, logprobs={"content": entries}))
    assert tally.tokens() == (10, 3)


def test_every_choice_of_a_multi_choice_stream_counts() -> None:
    tally = StreamTally(prompt_bound=10)
    tally.observe({"choices": [{"index": i, "delta": {"content": "x"}} for i in range(3)]})
    assert tally.tokens() == (10, 3)


def test_the_upstream_usage_wins_once_it_arrived() -> None:
    tally = StreamTally(prompt_bound=300)
    tally.observe(_chat({"content": "a"}))
    tally.observe({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 7}})
    assert tally.tokens() == (12, 7)


def test_usage_that_lags_the_chunks_read_never_lowers_the_count() -> None:
    tally = StreamTally(prompt_bound=300)
    for _ in range(5):
        tally.observe(_chat({"content": "a"}))
    tally.observe({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 2}})
    assert tally.tokens() == (12, 5)


def test_malformed_choices_and_usage_are_ignored_not_fatal() -> None:
    tally = StreamTally(prompt_bound=50)
    tally.observe({"choices": "oops", "usage": "none"})
    tally.observe({"choices": ["x", 1]})
    assert tally.tokens() == (50, 0)
