"""Router features (policies.route_features): what they read, and that offline and live agree."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from calibration.routing.prompt_features import prompt_request, request_features
from collection.prompts import load_prompts
from policies.route_features import (
    CHEAP,
    HASH_DIMS,
    KINDS,
    MAX_FEATURE_CHARS,
    cheap_features,
    feature_dims,
    request_parts,
    request_text,
)
from policies.tool_calls import request_kind

REPO = Path(__file__).resolve().parents[2]  # the repository root
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city."}}


def test_the_text_is_system_and_user_contents_then_tool_names_and_descriptions() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Rain "}, {"type": "text", "text": "in Oslo?"}],
        },
        {"role": "assistant", "content": "an earlier answer is not read"},
    ]
    assert request_text(messages, [TOOL]) == "Be brief.\nRain in Oslo?\nget_weather: Weather in a city."


def test_cheap_features_are_deterministic_normalized_and_name_tools_and_kind() -> None:
    first = cheap_features("What is 2 + 2?", 0, "text")
    assert first.shape == (feature_dims(CHEAP),)
    np.testing.assert_array_equal(first, cheap_features("What is 2 + 2?", 0, "text"))
    assert abs(np.linalg.norm(first[:HASH_DIMS]) - 1) < 1e-12
    assert first[HASH_DIMS + 2] == 0 and first[HASH_DIMS + 4 + KINDS.index("text")] == 1
    tools = cheap_features("What is 2 + 2?", 3, "tool_call")
    assert tools[HASH_DIMS + 2] == 1 and tools[HASH_DIMS + 4 + KINDS.index("tool_call")] == 1
    assert not np.array_equal(first[:HASH_DIMS], cheap_features("What is 2 * 2?", 0, "text")[:HASH_DIMS])


def test_an_empty_request_has_no_ngrams_and_a_huge_one_is_cut() -> None:
    empty = cheap_features("", 0, "text")
    assert not empty[:HASH_DIMS].any() and empty[HASH_DIMS] == 0
    text, _, _ = request_parts(
        {"messages": [{"role": "user", "content": "x" * (10 * MAX_FEATURE_CHARS)}]}, "text"
    )
    assert len(text) == MAX_FEATURE_CHARS


def test_a_prompt_set_row_gives_the_features_of_the_request_the_collector_sends() -> None:
    """Calibration reads prompt-set rows; the gateway reads the chat body the client sent: for every
    committed BFCL and MMLU row the two give the same vector."""
    for name in ("bfcl.jsonl", "mmlu-local.jsonl"):
        path = REPO / "collection" / "data" / name
        rows = [json.loads(line) for line in path.read_text().splitlines()[:40]]
        for prompt, row in zip(load_prompts(path, limit=40), rows, strict=True):
            sent = {"messages": prompt.messages(), **prompt.request_fields()}
            live_text, n_tools, kind = request_parts(sent, request_kind(sent))
            np.testing.assert_array_equal(
                request_features(prompt_request(row), CHEAP), cheap_features(live_text, n_tools, kind)
            )
