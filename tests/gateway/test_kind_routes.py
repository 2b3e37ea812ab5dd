"""One policy with a text route table and a tool-call section serves both kinds (policies.kinds).

Through the app with the official openai SDK and the scripted upstream: a request declaring tools is
routed by the policy's ``kinds.tool_call`` section (its routes, envelope and scorer), a text request
by the top level; the Responses API's function tools count as a tool request (the edge translates
to a chat body first); the kind is counted and the section's expectations are exported.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway_testkit import POLICY_DOCUMENT
from tests.support.policy_files import heldout_expectation
from tests.support.scripted_upstream import ok
from tests.support.weather_tool import CALL_AS_CONTENT, MESSAGES, TOOLS

# The section's own scorer: top_k 3 (the top level asks for 5), so each upstream call shows which
# scorer the gateway applied.
SECTION_TOP_K = 3
HELDOUT = heldout_expectation(
    cost_usd=(0.00012, 0.0001, 0.00015), quality=(0.81, 0.75, 0.86), escalation_rate=(0.22, 0.15, 0.3)
)


def tool_section() -> dict[str, Any]:
    """The tool-call routes: medium -> large in every tier but ``direct``; scorer min_probability."""
    tiers = copy.deepcopy(POLICY_DOCUMENT["tiers"])
    for name, tier in tiers.items():
        if name != "direct":
            tier["routes"] = [{"weight": 1.0, "models": ["medium", "large"], "thresholds": [0.9]}]
        tier["expected"] = {"cost_usd": 0.00011, "quality": 0.83, "escalation_rate": 0.2}
    tiers["balanced"]["expected"]["heldout"] = HELDOUT
    return {
        "models": {
            "medium": {"mean_cost_usd": 0.0001, "quality": 0.7},
            "large": {"mean_cost_usd": 0.001, "quality": 0.9},
        },
        "default_tier": POLICY_DOCUMENT["default_tier"],
        "tiers": tiers,
        "envelope": [
            {"cost_usd": 0.0001, "quality": 0.7, "models": ["medium"], "thresholds": []},
            {"cost_usd": 0.00011, "quality": 0.83, "models": ["medium", "large"], "thresholds": [0.9]},
            {"cost_usd": 0.001, "quality": 0.9, "models": ["large"], "thresholds": []},
        ],
        "scorer": {"name": "min_probability", "top_k": SECTION_TOP_K},
    }


@pytest.fixture
def kinds_gateway(start_gateway: Any, make_settings: Any, write_policy: Any) -> Any:
    policy: Path = write_policy(kinds={"tool_call": tool_section()})
    return start_gateway(make_settings(policy=policy))


def test_a_tools_request_takes_the_tool_section_and_a_text_request_the_top_level(
    kinds_gateway: Any, upstream: Any
) -> None:
    upstream.script("up-medium", ok(CALL_AS_CONTENT, confidence=0.95))
    upstream.script("up-small", ok("It is sunny.", confidence=0.99))
    client = kinds_gateway.client()

    tools = client.chat.completions.with_raw_response.create(
        model="cascade/balanced", messages=MESSAGES, tools=TOOLS
    )
    assert tools.headers["x-cascade-models-called"] == "medium"  # min_probability 0.95 >= 0.9
    assert tools.headers["x-cascade-tier"] == "balanced"
    assert tools.parse().choices[0].message.content == CALL_AS_CONTENT
    (medium_call,) = upstream.calls("up-medium")
    assert medium_call.body["top_logprobs"] == SECTION_TOP_K and medium_call.body["tools"] == TOOLS

    text = client.chat.completions.with_raw_response.create(model="cascade/balanced", messages=MESSAGES)
    assert text.headers["x-cascade-models-called"] == "small"
    (small_call,) = upstream.calls("up-small")
    assert small_call.body["top_logprobs"] == 5 and "tools" not in small_call.body
    assert upstream.calls("up-large") == []


def test_the_section_decides_with_its_own_threshold_and_scorer(kinds_gateway: Any, upstream: Any) -> None:
    # min_probability 0.8 < the section's threshold 0.9: escalated to the section's last stage.
    upstream.script("up-medium", ok(CALL_AS_CONTENT, confidence=0.8))
    upstream.script("up-large", ok(CALL_AS_CONTENT, confidence=0.99))
    reply = kinds_gateway.client().chat.completions.with_raw_response.create(
        model="cascade", messages=MESSAGES, tools=TOOLS
    )
    assert reply.headers["x-cascade-models-called"] == "medium,large"
    assert reply.headers["x-cascade-escalated"] == "true"
    assert reply.headers["x-cascade-threshold"] == "0.9"


def test_a_budget_is_looked_up_on_the_kinds_envelope(kinds_gateway: Any, upstream: Any) -> None:
    upstream.script("up-medium", ok(CALL_AS_CONTENT))
    upstream.script("up-small", ok("It is sunny."))
    client = kinds_gateway.client(default_headers={"X-Cascade-Max-Cost-Usd": "0.000105"})
    tools = client.chat.completions.with_raw_response.create(model="cascade", messages=MESSAGES, tools=TOOLS)
    assert tools.headers["x-cascade-tier"] == "budget"
    assert tools.headers["x-cascade-models-called"] == "medium"  # the section's cheapest point
    text = client.chat.completions.with_raw_response.create(model="cascade", messages=MESSAGES)
    assert text.headers["x-cascade-models-called"] == "small"  # the top level's cheapest point


def test_a_responses_request_with_function_tools_is_a_tool_request(kinds_gateway: Any, upstream: Any) -> None:
    upstream.script("up-medium", ok(CALL_AS_CONTENT, confidence=0.95))
    function = TOOLS[0]["function"]
    response = kinds_gateway.client().responses.with_raw_response.create(
        model="cascade/balanced",
        input="What is the weather in Paris?",
        tools=[{"type": "function", "name": function["name"], "parameters": function["parameters"]}],
    )
    assert response.headers["x-cascade-models-called"] == "medium"
    assert len(upstream.calls("up-medium")) == 1 and upstream.calls("up-small") == []


def test_requests_are_counted_by_kind_and_each_kinds_expectations_exported(
    kinds_gateway: Any, upstream: Any
) -> None:
    upstream.set_default("up-medium", ok(CALL_AS_CONTENT, confidence=0.95))
    upstream.set_default("up-small", ok("It is sunny.", confidence=0.99))
    client = kinds_gateway.client()
    for _ in range(2):
        client.chat.completions.create(model="cascade/balanced", messages=MESSAGES, tools=TOOLS)
    client.chat.completions.create(model="cascade/balanced", messages=MESSAGES)
    families = kinds_gateway.metrics()
    counted = {
        (s.labels["tier"], s.labels["kind"]): s.value
        for s in families["cascade_requests_by_kind"].samples
        if s.name == "cascade_requests_by_kind_total"
    }
    assert counted == {("balanced", "tool_call"): 2.0, ("balanced", "text"): 1.0}
    expected = {
        (s.labels["tier"], s.labels["kind"], s.labels["measure"]): s.value
        for s in families["cascade_expected_by_kind"].samples
    }
    # The held-out mean where the policy has one, else the in-sample expectation.
    assert expected[("balanced", "tool_call", "quality")] == pytest.approx(HELDOUT["quality"]["mean"])
    assert expected[("chain", "tool_call", "escalation_rate")] == pytest.approx(0.2)
    assert expected[("balanced", "text", "escalation_rate")] == pytest.approx(0.4)
    assert {kind for _, kind, _ in expected} == {"text", "tool_call"}


def test_the_request_log_line_names_the_kind(
    kinds_gateway: Any, upstream: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gateway.api.request_log

    logged: list[dict[str, Any]] = []
    original = gateway.api.request_log.log_fields  # the request line's (gateway.wire.logs)

    def record(event: str, fields: dict[str, Any], level: int = logging.INFO) -> None:
        if event == "request":
            logged.append(fields)
        original(event, fields, level)

    monkeypatch.setattr(gateway.api.request_log, "log_fields", record)
    upstream.set_default("up-medium", ok(CALL_AS_CONTENT, confidence=0.95))
    upstream.set_default("up-small", ok("It is sunny.", confidence=0.99))
    client = kinds_gateway.client()
    client.chat.completions.create(model="cascade/balanced", messages=MESSAGES, tools=TOOLS)
    client.chat.completions.create(model="cascade/balanced", messages=MESSAGES)
    client.chat.completions.create(model="small", messages=MESSAGES, tools=TOOLS)  # passthrough
    assert [(line["kind"], line["tier"], line["answered_by"]) for line in logged] == [
        ("tool_call", "balanced", "medium"),
        ("text", "balanced", "small"),
        ("tool_call", "passthrough", "small"),
    ]
