"""Scoring the decisions of a call (policies/call_tokens.py, ScorerSpec.tokens = "call_values"):
token lists aligned to the JSON they spell, the name and argument values selected, everything else
(text, invalid JSON, unalignable entries) scored whole."""

from __future__ import annotations

import math
from typing import Any

import pytest

from policies import UnknownScorerError, build_policy, dump_policy, parse_policy
from policies.call_tokens import call_value_positions, call_value_spans, select_tokens
from policies.scorers import SCORERS, score_logprobs, score_response
from tests.support.recorded_replies import CALL_AS_CONTENT

REPLY = CALL_AS_CONTENT["reply"]


def entries(*tokens: str, probability: float = 0.9) -> list[dict[str, Any]]:
    """Content entries spelling ``tokens`` (chosen-token logprob from ``probability``, 3 alternatives)."""
    return [
        {
            "token": token,
            "logprob": math.log(probability),
            "top_logprobs": [
                {"token": token, "logprob": math.log(probability)},
                {"token": "x", "logprob": math.log((1 - probability) / 2)},
                {"token": "y", "logprob": math.log((1 - probability) / 2)},
            ],
        }
        for token in tokens
    ]


def selected(*tokens: str) -> list[str] | None:
    content = entries(*tokens)
    positions = call_value_positions(content)
    return None if positions is None else [content[i]["token"] for i in positions]


def test_a_fenced_call_selects_the_name_and_the_values_not_the_keys_quotes_braces_or_fence() -> None:
    tokens = [
        "```",
        "json",
        "\n",
        "{\n",
        ' "',
        "name",
        '":',
        ' "',
        "get",
        "_weather",
        '",\n',
        ' "',
        "arguments",
    ]
    tokens += ['":', ' {"', "city", '":', ' "', "Paris", '",', ' "', "days", '":', " ", "3", "}}\n", "```"]
    assert selected(*tokens) == ["get", "_weather", "Paris", "3"]


def test_a_bare_call_and_the_parameters_spelling_select_the_same_decisions() -> None:
    assert selected('{"', "name", '":"', "f", '","', "arguments", '":{"', "x", '":', "true", "}}") == [
        "f",
        "true",
    ]
    assert selected('{"', "name", '":"', "f", '","', "parameters", '":{"', "x", '":', "true", "}}") == [
        "f",
        "true",
    ]


def test_two_calls_in_a_list_in_fences_and_in_tags_select_both() -> None:
    one = ['{"name":"', "a", '","arguments":{"k":', "1", "}}"]
    two = ['{"name":"', "b", '","arguments":{"k":"', "v", '"}}']
    assert selected("[", *one, ",", *two, "]") == ["a", "1", "b", "v"]
    assert selected("```json\n", *one, "\n```\n```json\n", *two, "\n```") == ["a", "1", "b", "v"]
    assert selected("<tool_call>\n", *one, "\n</tool_call>\n<tool_call>", *two, "</tool_call>") == [
        "a",
        "1",
        "b",
        "v",
    ]
    assert selected(*one, "\n", *two) == ["a", "1", "b", "v"]  # one after another


def test_text_before_a_native_call_syntax_is_left_out_and_only_the_calls_decisions_count() -> None:
    call = ['{"name": "', "f", '", "arguments": {"x": ', "2", "}}"]
    assert selected("I", " will", " call", " f", ".\n", "<tool_call>", "\n", *call, "\n", "</tool_call>") == [
        "f",
        "2",
    ]
    assert selected("[TOOL", "_CALLS", "]", "[", *call, "]") == ["f", "2"]
    # Without the syntax, text around a call is text (scored whole).
    assert selected("I", " will", " call", " f", ":\n", *call) is None


def test_a_value_split_across_tokens_selects_every_piece() -> None:
    assert selected('{"name":"', "calc", "ulate", '","arguments":{"n":', "1", "0", ".", "5", "}}") == [
        "calc",
        "ulate",
        "1",
        "0",
        ".",
        "5",
    ]


def test_tokens_straddling_a_value_boundary_are_selected_and_tokens_touching_it_are_not() -> None:
    # '"Par' holds the opening quote and the value's start; 'is",' its end and the next key's quote.
    assert selected('{"name":', ' "f', '", "arguments": {"c":', ' "Par', 'is",', ' "d": ', "2", "}}") == [
        ' "f',
        ' "Par',
        'is",',
        "2",
    ]


def test_unicode_values_align_on_bytes_including_a_character_split_across_tokens() -> None:
    content = entries('{"name":"', "f", '","arguments":{"city":"', "Zürich", '","to":"', "", "", '"}}')
    # "é" (2 bytes) in two entries with an empty token and the bytes (as llama.cpp sends them).
    content[5]["bytes"], content[6]["bytes"] = [0xC3], [0xA9]
    content[3]["bytes"] = list("Zürich".encode())
    positions = call_value_positions(content)
    assert positions == [1, 3, 5, 6]
    # The same pieces as OpenAI writes them (escaped) and as a lossy decoder would (U+FFFD).
    for first, second in (("bytes:\\xc3", "\\xa9"), ("\ufffd", "\ufffd")):
        content[5]["token"], content[6]["token"] = first, second
        assert call_value_positions(content) == [1, 3, 5, 6]
    spans = call_value_spans('{"name":"f","arguments":{"city":"Zürich","to":"é"}}')
    assert spans == [(9, 10), (33, 39), (47, 48)]


def test_nested_values_are_leaves_and_empty_values_are_their_own_decision() -> None:
    assert selected(
        '{"name":"', "f", '","arguments":{"a":[', "1", ",", "2", '],"b":{"c":', "null", '},"d":"', '"}}'
    ) == [
        "f",
        "1",
        "2",
        "null",
        '"}}',  # the empty string's closing quote: the choice to leave it empty
    ]
    assert selected('{"name":"', "f", '","arguments":', "{}", "}") == ["f", "{}"]


@pytest.mark.parametrize(
    "text",
    [
        "The weather in Paris is sunny.",
        'Here is the call: {"name": "f", "arguments": {}}',  # text around a call: text
        '{"answer": 4}',  # JSON that is not a call
        '{"name": "f", "arguments": {"x": 1}, "id": 3}',  # a key a call does not have
        '{"name": 3, "arguments": {}}',
        '{"name": "f", "arguments": {"x": 1',  # truncated
        '{"name": "f", "arguments": {"x": 1,}}',  # trailing comma
        '{"name": "f" "arguments": {}}',
        '[{"name": "f"}, 3]',
        '"name"',
    ],
)
def test_anything_but_calls_is_not_a_call(text: str) -> None:
    assert call_value_spans(text) is None
    content = entries(*text)
    assert select_tokens(content, "call_values") is content


def test_text_and_unalignable_entries_are_scored_whole() -> None:
    text = entries("The", " answer", " is", " 4")
    for name in SCORERS:
        assert score_logprobs(text, name, 3, "call_values") == score_logprobs(text, name, 3)
    call = entries('{"name":"', "f", '","arguments":{}}')
    broken = [*call[:2], "not an entry", *call[2:]]
    assert select_tokens(broken, "call_values") is broken
    no_token = [*call[:1], {"logprob": -0.1}, *call[1:]]
    assert select_tokens(no_token, "call_values") is no_token
    assert select_tokens([], "call_values") == [] and select_tokens(None, "call_values") is None


def test_call_values_scores_the_selected_entries_with_the_scorers_own_formula() -> None:
    content = entries('{"name":"', "f", '","arguments":{"x":', "1", "}}")
    content[1]["logprob"] = math.log(0.5)  # the name: the least confident decision
    content[1]["top_logprobs"] = [
        {"token": "f", "logprob": math.log(0.5)},
        {"token": "g", "logprob": math.log(0.5)},
    ]
    decisions = [content[1], content[3]]
    for name in SCORERS:
        assert score_logprobs(content, name, 3, "call_values") == score_logprobs(decisions, name, 3)
    assert score_logprobs(content, "min_probability", 3, "call_values") == pytest.approx(0.5)
    assert score_logprobs(content, "mean_logprob", 3, "call_values") == pytest.approx(
        (math.log(0.5) + math.log(0.9)) / 2
    )


def test_an_unknown_tokens_value_is_refused() -> None:
    with pytest.raises(UnknownScorerError, match="call_value"):
        score_logprobs(entries("a"), "min_probability", 3, "values")


def test_the_recorded_reply_scores_its_name_and_values_only() -> None:
    content = REPLY["choices"][0]["logprobs"]["content"]
    positions = call_value_positions(content)
    assert positions is not None
    assert [content[i]["token"] for i in positions] == [
        "calculate",
        "_triangle",
        "_area",
        "1",
        "0",
        "5",
        "units",
    ]
    for name in SCORERS:
        expected = score_logprobs([content[i] for i in positions], name, 5)
        assert score_response(REPLY, name, 5, "call_values") == expected
    # The whole answer's least confident token is formatting ('{\n'); the decisions' is higher.
    assert score_response(REPLY, "min_probability", 5, "call_values") > score_response(
        REPLY, "min_probability", 5
    )


def test_a_native_call_is_aligned_on_its_raw_tokens_and_legacy_logprobs_too() -> None:
    tokens = [
        "<tool_call>",
        "\n",
        '{"name": "',
        "get",
        "_weather",
        '", "arguments": {"city": "',
        "Paris",
        '"}}',
    ]
    body = {
        "choices": [
            {
                "message": {
                    "content": None,
                    "tool_calls": [{"type": "function", "function": {"name": "get_weather"}}],
                },
                "logprobs": {"content": entries(*tokens, "\n", "</tool_call>")},
            }
        ]
    }
    decisions = [body["choices"][0]["logprobs"]["content"][i] for i in (3, 4, 6)]
    assert score_response(body, "mean_logprob", 3, "call_values") == score_logprobs(
        decisions, "mean_logprob", 3
    )
    legacy = {
        "choices": [
            {
                "logprobs": {
                    "tokens": tokens,
                    "token_logprobs": [math.log(0.9)] * 5 + [math.log(0.5)] + [math.log(0.9)] * 2,
                    "top_logprobs": [{t: math.log(0.9)} for t in tokens],
                }
            }
        ]
    }
    # The low-probability formatting token (index 5) is not a decision.
    assert score_response(legacy, "min_probability", 1, "call_values") == pytest.approx(0.9)
    assert score_response(legacy, "min_probability", 1) == pytest.approx(0.5)


def test_the_tokens_option_is_in_the_policy_only_when_it_is_not_all(policy_document: dict[str, Any]) -> None:
    plain = build_policy(policy_document)
    assert plain.scorer.tokens == "all" and "tokens" not in dump_policy(plain)
    document = {**policy_document, "scorer": {**policy_document["scorer"], "tokens": "call_values"}}
    calls = build_policy(document)
    assert calls.scorer.tokens == "call_values" and '"tokens": "call_values"' in dump_policy(calls)
    assert calls.policy_id != plain.policy_id  # a policy that scores other tokens is another policy
    explicit = build_policy({**policy_document, "scorer": {**policy_document["scorer"], "tokens": "all"}})
    assert explicit.policy_id == plain.policy_id
    assert parse_policy(dump_policy(calls)).scorer.tokens == "call_values"
