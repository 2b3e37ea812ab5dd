"""Sampled rows record the request's kind, and a kind with a section of its own is sampled with that
section's pool and scorer (policies.kinds), so a policy recalibrated from the traffic keeps kinds apart.

Through the app with the official openai SDK, the scripted upstream and the JSONL file store. The
policy's top level routes small -> large (scorer mean_token_negentropy, top_k 5); its tool-call
section routes medium -> large with scorer min_probability, top_k 3.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from learning_support import learning_block

from policies import score_logprobs
from tests.support.gateway_testkit import POLICY_DOCUMENT, until
from tests.support.scripted_upstream import ok
from tests.support.traffic_rows import stored_rows
from tests.support.weather_tool import CALL_AS_CONTENT, MESSAGES, TOOLS
from traffic.rows import TrafficRow

SECTION_SCORER = {"name": "min_probability", "top_k": 3}


def tool_section() -> dict[str, Any]:
    """Routes medium -> large in every tier (``direct``: large), pool medium and large."""
    tiers = copy.deepcopy(POLICY_DOCUMENT["tiers"])
    for name, tier in tiers.items():
        if name != "direct":
            tier["routes"] = [{"weight": 1.0, "models": ["medium", "large"], "thresholds": [0.5]}]
    return {
        "models": {
            "medium": {"mean_cost_usd": 0.0001, "quality": 0.7},
            "large": {"mean_cost_usd": 0.001, "quality": 0.9},
        },
        "default_tier": POLICY_DOCUMENT["default_tier"],
        "tiers": tiers,
        "envelope": [
            {"cost_usd": 0.0001, "quality": 0.7, "models": ["medium"], "thresholds": []},
            {"cost_usd": 0.001, "quality": 0.9, "models": ["large"], "thresholds": []},
        ],
        "scorer": SECTION_SCORER,
    }


def rows_of(url: str, query_id: str, count: int) -> dict[str, TrafficRow]:
    """The store's rows of ``query_id`` by model, once there are ``count`` of them."""
    found: dict[str, TrafficRow] = {}

    def enough() -> bool:
        found.clear()
        found.update({r.model: r for r in stored_rows(url) if r.query_id == query_id})
        return len(found) >= count

    assert until(enough, 20.0), f"the store holds {len(found)} rows of {query_id}, expected {count}"
    return found


def test_rows_record_the_request_kind_and_a_section_s_pool_and_scorer(
    start_gateway: Callable, make_settings: Callable, write_policy: Callable, upstream: Any, tmp_path: Path
) -> None:
    url = f"file://{tmp_path / 'traffic.jsonl'}"
    for model_id in ("up-small", "up-medium", "up-large"):
        upstream.set_default(model_id, ok(CALL_AS_CONTENT, confidence=0.99))
    policy = write_policy(kinds={"tool_call": tool_section()})
    running = start_gateway(make_settings(policy=policy, learning=learning_block(url)))
    client = running.client()

    tool = client.chat.completions.with_raw_response.create(model="cascade", messages=MESSAGES, tools=TOOLS)
    tool_rows = rows_of(url, tool.headers["x-request-id"], 2)
    # The section's pool (medium, large), not the top level's: small never answers a tool request.
    assert set(tool_rows) == {"medium", "large"}
    for row in tool_rows.values():
        assert row.kind == "tool_call" and row.policy_id == running.gateway.policy.policy_id
        assert row.score == pytest.approx(score_logprobs(row.logprobs, "min_probability", 3))

    text = client.chat.completions.with_raw_response.create(model="cascade", messages=MESSAGES)
    text_rows = rows_of(url, text.headers["x-request-id"], 3)
    assert set(text_rows) == {"small", "medium", "large"}
    for row in text_rows.values():
        assert row.kind == "text"
        assert row.score == pytest.approx(score_logprobs(row.logprobs, "mean_token_negentropy", 5))

    structured = client.chat.completions.with_raw_response.create(
        model="cascade", messages=MESSAGES, response_format={"type": "json_object"}
    )
    structured_rows = rows_of(url, structured.headers["x-request-id"], 3)
    assert {row.kind for row in structured_rows.values()} == {"structured_output"}  # no section: top level
