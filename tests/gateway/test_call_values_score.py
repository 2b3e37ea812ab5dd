"""A policy whose scorer reads ``tokens: call_values`` scores the recorded llama-server call (written as
content) on its function name and argument values, to the value ``policies.score_response`` gives:
the decisions are certain, the formatting is not, so the call is accepted where scoring every token
escalates it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from policies import score_response
from policies.call_tokens import call_value_positions
from tests.support.gateway_testkit import RunningGateway, model_configs
from tests.support.recorded_replies import CALL_AS_CONTENT
from tests.support.scripted_upstream import Reply

RECORDED = CALL_AS_CONTENT
REQUEST: dict[str, Any] = RECORDED["request"]
SCORER = "min_token_negentropy"  # the least certain position: formatting in the whole answer
TOP_K = 5


def reply() -> Reply:
    """The recorded reply as it came (a fresh copy: the gateway normalizes answers in place)."""
    return Reply(body=json.loads(json.dumps(RECORDED["reply"])))


def start(start_gateway, make_settings, upstream, write_policy, tokens: str) -> RunningGateway:
    """The test gateway, ``small`` and ``large`` writing calls as content, scored with ``tokens``."""
    models = model_configs(upstream.base_url)
    for name in ("small", "large"):
        models[name]["tool_calls"] = "content"
    policy = write_policy(scorer={"name": SCORER, "top_k": TOP_K, "tokens": tokens})
    return start_gateway(make_settings(policy=policy, models=models))


def test_the_call_is_scored_on_its_decisions_and_accepted(
    start_gateway, make_settings, upstream, write_policy
) -> None:
    gateway = start(start_gateway, make_settings, upstream, write_policy, "call_values")
    upstream.script("up-small", reply())
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="cascade", messages=REQUEST["messages"], tools=REQUEST["tools"]
    )
    expected = score_response(RECORDED["reply"], SCORER, TOP_K, "call_values")
    content = RECORDED["reply"]["choices"][0]["logprobs"]["content"]
    decisions = [content[i] for i in call_value_positions(content) or []]
    assert len(decisions) == 7 and expected is not None and expected > 0.5  # the default threshold
    assert float(raw.headers["x-cascade-score"]) == pytest.approx(expected, rel=1e-5)
    assert raw.headers["x-cascade-models-called"] == "small"
    (call,) = raw.parse().choices[0].message.tool_calls or []
    assert call.function.name == "calculate_triangle_area"
    assert upstream.calls("up-large") == []


def test_scoring_every_token_escalates_the_same_call(
    start_gateway, make_settings, upstream, write_policy
) -> None:
    gateway = start(start_gateway, make_settings, upstream, write_policy, "all")
    upstream.script("up-small", reply())
    upstream.script("up-large", reply())
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="cascade", messages=REQUEST["messages"], tools=REQUEST["tools"]
    )
    whole = score_response(RECORDED["reply"], SCORER, TOP_K)
    assert whole is not None and whole < 0.5
    assert raw.headers["x-cascade-models-called"] == "small,large"
    assert raw.headers["x-cascade-escalation-reason"] == "low_score"
