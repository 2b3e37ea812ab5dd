"""The commit rule of a tier: its policy shape, and the one definition of the prefix it scores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from policies.commit import CommitRule, line_end, prefix_entries, prefix_length
from policies.schema import Policy
from policies.store import build_policy, policy_as_document

ROOT = Path(__file__).resolve().parents[2]


def entries(*tokens: str) -> list[dict[str, object]]:
    return [{"token": t, "logprob": -0.1, "top_logprobs": [{"token": t, "logprob": -0.1}]} for t in tokens]


def test_a_prefix_is_at_most_k_tokens_and_a_short_answer_is_read_whole() -> None:
    answer = entries("12", " *", " 4", " =", " 48")
    assert prefix_length(answer, 3) == 3
    assert prefix_length(answer, 50) == 5
    assert [e["token"] for e in prefix_entries(answer, 2)] == ["12", " *"]
    assert prefix_entries(None, 4) == []


def test_the_line_boundary_stops_after_the_first_line_unless_k_comes_first() -> None:
    answer = entries("Step", " 1", ":\n", "3", " *", "\n", "Answer")
    assert prefix_length(answer, 32, "line") == 3
    assert prefix_length(answer, 2, "line") == 2
    # A newline as the very first token does not end a line of content.
    assert prefix_length(entries("\n", "a", "b\n", "c"), 32, "line") == 3


def test_a_line_end_is_looked_for_from_start_within_k_and_never_at_the_first_token() -> None:
    answer = entries("\n", "12", "\n", " 4", ".\n")
    assert line_end(answer, 8) == 2  # the leading newline is not counted
    assert line_end(answer, 8, start=3) == 4  # a growing list: only the new entries are read
    assert line_end(answer, 2) is None  # past K: the prefix ends at K instead
    assert prefix_length(answer, 8, "line") == 3


def test_the_rule_shape_refuses_a_prefix_without_tokens_and_a_buffer_with_them() -> None:
    assert CommitRule(rule="prefix", tokens=32, boundary="line").document() == {
        "rule": "prefix",
        "tokens": 32,
        "boundary": "line",
    }
    assert CommitRule(rule="buffer").document() == {"rule": "buffer"}
    for bad in ({"rule": "prefix"}, {"rule": "buffer", "tokens": 8}, {"rule": "buffer", "boundary": "line"}):
        with pytest.raises(ValidationError):
            CommitRule.model_validate(bad)
    with pytest.raises(ValidationError):
        CommitRule.model_validate({"rule": "prefix", "tokens": 8, "extra": 1})


def test_a_policy_without_commit_keeps_its_id_and_one_with_it_gets_another() -> None:
    document = json.loads((ROOT / "policies" / "local-demo.json").read_text())
    policy = Policy.model_validate(document)
    assert all("commit" not in tier for tier in policy_as_document(policy)["tiers"].values())
    assert build_policy(policy_as_document(policy)).policy_id == policy.policy_id
    name = next(iter(document["tiers"]))
    document["tiers"][name]["commit"] = {"rule": "prefix", "tokens": 16}
    changed = build_policy(document)
    assert changed.policy_id != policy.policy_id
    assert policy_as_document(changed)["tiers"][name]["commit"] == {"rule": "prefix", "tokens": 16}
