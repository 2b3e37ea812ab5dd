"""Cut answers (policies.truncation): ``finish_reason: length`` at a cap the client did not set."""

from __future__ import annotations

from typing import Any

import pytest

from policies.truncation import client_cap, cut_short


def answer(finish: str | None, completion_tokens: int | None = 8, *, legacy: bool = False) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
    choice.update({"text": "A hash table"} if legacy else {"message": {"content": "A hash table"}})
    body: dict[str, Any] = {"choices": [choice]}
    if completion_tokens is not None:
        body["usage"] = {"prompt_tokens": 12, "completion_tokens": completion_tokens}
    return body


@pytest.mark.parametrize(
    ("request_fields", "reply", "cut"),
    [
        ({}, answer("length"), True),  # the member's default cap cut it
        ({}, answer("length", None), True),
        ({}, answer("length", legacy=True), True),  # /v1/completions
        ({}, answer("stop"), False),
        ({}, answer("tool_calls"), False),
        ({"max_tokens": 8}, answer("length", 8), False),  # the client's own cap: asked for
        ({"max_completion_tokens": 8}, answer("length", 8), False),
        ({"n_predict": 8}, answer("length", 8), False),  # llama.cpp's spelling of the client's cap
        ({"n_predict": -1}, answer("length", 8), True),  # unbounded to llama.cpp: no client cap
        ({"max_tokens": 8}, answer("length", None), False),  # no count: taken as the client's cap
        ({"max_tokens": 512}, answer("length", 40), True),  # stopped below it: the context ran out
        ({"max_tokens": 0}, answer("length"), True),  # not a cap
        ({"max_tokens": True}, answer("length"), True),
        ({}, {"choices": "nope"}, False),
        ({}, {}, False),
    ],
)
def test_cut_short(request_fields, reply, cut) -> None:
    assert cut_short({"messages": [], **request_fields}, reply) is cut


def test_any_choice_cut_counts() -> None:
    reply = {"choices": [answer("stop")["choices"][0], answer("length")["choices"][0]]}
    assert cut_short({}, reply)


def test_client_cap_reads_every_spelling_the_charging_rule_reads() -> None:
    assert client_cap({"max_tokens": 5}) == 5
    assert client_cap({"max_completion_tokens": 7}) == 7
    assert client_cap({"n_predict": 9}) == 9
    assert client_cap({"max_tokens": "5"}) is None
    assert client_cap({}) is None


def test_the_client_cap_of_a_request_setting_several_is_the_smallest() -> None:
    # An upstream honours one of them; an answer that reached the smallest stopped at the client's cap.
    assert client_cap({"max_tokens": 8, "n_predict": 100}) == 8
    assert not cut_short({"max_tokens": 8, "n_predict": 100}, answer("length", 8))
