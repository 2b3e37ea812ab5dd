"""``PrefixGate`` against the offline definition of the prefix (``policies.commit.prefix_entries``):
the tokens it holds, where it decides and the score it gives are those calibration computes from the
same answer's recorded logprobs."""

from __future__ import annotations

import math
from typing import Any

import pytest

from gateway.streaming.prefix_commit import PrefixGate
from policies import score_logprobs
from policies.commit import CommitRule, prefix_entries
from policies.schema import ScorerSpec

SPEC = ScorerSpec(name="mean_token_negentropy", top_k=3)


def entry(token: str, p: float) -> dict[str, Any]:
    rest = math.log((1 - p) / 2)
    alternatives = [
        {"token": token, "logprob": math.log(p)},
        {"token": "a", "logprob": rest},
        {"token": "b", "logprob": rest},
    ]
    return {"token": token, "logprob": math.log(p), "top_logprobs": alternatives}


ANSWER = [
    entry(t, p)
    for t, p in zip(
        ["Step", " one", ":", " 3", "\n", "Step", " two", "\n", "Answer"],
        [0.9, 0.6, 0.99, 0.5, 0.97, 0.8, 0.7, 0.9, 0.95],
        strict=True,
    )
]


def chat_chunks(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}]}
    return [role] + [
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": e["token"]},
                    "logprobs": {"content": [e]},
                    "finish_reason": None,
                }
            ]
        }
        for e in entries
    ]


@pytest.mark.parametrize(
    ("rule", "decided_at"),
    [
        (CommitRule(rule="prefix", tokens=3), 3),
        (CommitRule(rule="prefix", tokens=8, boundary="line"), 5),  # the newline at position 5 comes first
        (CommitRule(rule="prefix", tokens=4, boundary="line"), 4),  # K comes first
    ],
)
def test_the_gate_decides_on_the_offline_prefix(rule: CommitRule, decided_at: int) -> None:
    gate = PrefixGate(rule)
    reached = [gate.hold(chunk) for chunk in chat_chunks(ANSWER)]
    assert reached.index(True) == decided_at  # chunk 0 is the role chunk
    offline = prefix_entries(ANSWER, rule.tokens or 0, rule.boundary)
    assert gate.tokens == len(offline) == decided_at
    assert gate.score(SPEC) == pytest.approx(score_logprobs(offline, SPEC.name, SPEC.top_k))


def test_a_legacy_completions_stream_is_read_from_its_parallel_lists() -> None:
    gate = PrefixGate(CommitRule(rule="prefix", tokens=2), legacy=True)
    chunks = [
        {
            "choices": [
                {
                    "index": 0,
                    "text": e["token"],
                    "logprobs": {
                        "tokens": [e["token"]],
                        "token_logprobs": [e["logprob"]],
                        "top_logprobs": [{a["token"]: a["logprob"] for a in e["top_logprobs"]}],
                    },
                    "finish_reason": None,
                }
            ]
        }
        for e in ANSWER[:3]
    ]
    assert [gate.hold(c) for c in chunks] == [False, True, True]
    assert gate.score(SPEC) == pytest.approx(score_logprobs(ANSWER[:2], SPEC.name, SPEC.top_k))


def test_an_answer_shorter_than_the_prefix_is_assembled_whole() -> None:
    gate = PrefixGate(CommitRule(rule="prefix", tokens=50))
    chunks = chat_chunks(ANSWER[:2])
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    assert not any(gate.hold(c) for c in chunks)
    whole = gate.answer({"prompt_tokens": 5, "completion_tokens": 2})
    assert whole is not None
    assert whole["choices"][0]["message"]["content"] == "Step one"
    assert whole["choices"][0]["finish_reason"] == "length"
    assert whole["choices"][0]["logprobs"]["content"] == ANSWER[:2]
    assert whole["usage"]["completion_tokens"] == 2
    assert PrefixGate(CommitRule(rule="prefix", tokens=5)).answer(None) is None  # nothing held


def test_a_gate_without_a_decision_point_holds_a_whole_answer_with_its_tool_calls() -> None:
    gate = PrefixGate(None)
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "weather", "arguments": ""}}
    chunks = [
        {"id": "c", "created": 1, "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]},
        {
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}}
            ]
        },
        {
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}}
            ]
        },
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]

    assert not any(gate.hold(chunk) for chunk in chunks)  # never decides: the stream is held whole
    answer = gate.answer({"prompt_tokens": 7, "completion_tokens": 3})

    assert answer is not None
    (choice,) = answer["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    assert choice["message"]["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}}
    ]
    assert answer["usage"] == {"prompt_tokens": 7, "completion_tokens": 3}
