"""The config's ``coverage`` (gateway/config/coverage.py): what the policy was calibrated on is served through
it, everything else goes to one model directly, tier ``uncalibrated``. Through the app with the
official openai SDK in front of the scripted upstream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.config.coverage import CoverageConfig, covered
from gateway.config.settings import ConfigError
from tests.support.gateway_testkit import POLICY_DOCUMENT
from tests.support.scripted_upstream import ok

COVERAGE = {"min_numbers": 2, "otherwise": "medium"}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
CALL_AS_CONTENT = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


def tool_section() -> dict[str, Any]:
    """A tool-call section whose every tier is ``medium`` alone."""
    route = {"weight": 1.0, "models": ["medium"], "thresholds": []}
    expected = {"cost_usd": 0.0001, "quality": 0.7, "escalation_rate": 0.0}
    tiers = {
        name: {**tier, "routes": [route], "expected": expected}
        for name, tier in POLICY_DOCUMENT["tiers"].items()
    }
    return {
        "models": {"medium": {"mean_cost_usd": 0.0001, "quality": 0.7}},
        "default_tier": POLICY_DOCUMENT["default_tier"],
        "tiers": tiers,
    }


def user(text: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


@pytest.fixture
def covered_gateway(start_gateway: Any, make_settings: Any, write_policy: Any) -> Any:
    policy: Path = write_policy(kinds={"tool_call": tool_section()})
    return start_gateway(make_settings(policy=policy, coverage=COVERAGE))


def test_text_outside_the_calibration_goes_to_the_other_model_directly(covered_gateway, upstream) -> None:
    upstream.script("up-medium", ok("Hello! How can I help you today?", confidence=None))
    raw = covered_gateway.client().chat.completions.with_raw_response.create(
        model="cascade", messages=user("hello")
    )
    assert raw.headers["x-cascade-tier"] == "uncalibrated"
    assert raw.headers["x-cascade-models-called"] == "medium" and raw.headers["x-cascade-policy"] == "none"
    assert raw.headers["x-cascade-escalated"] == "false"
    assert raw.parse().choices[0].message.content == "Hello! How can I help you today?"
    (sent,) = upstream.calls("up-medium")
    assert "logprobs" not in sent.body  # no cascade: nothing to score
    assert covered_gateway.sample("cascade_requests_total", tier="uncalibrated", outcome="passthrough") == 1.0


def test_covered_text_goes_through_the_policy(covered_gateway, upstream) -> None:
    upstream.script("up-small", ok("42", confidence=0.99))
    raw = covered_gateway.client().chat.completions.with_raw_response.create(
        model="cascade", messages=user("What is 23 + 19?")
    )
    assert raw.headers["x-cascade-tier"] == "balanced" and raw.headers["x-cascade-models-called"] == "small"


def test_a_named_tier_or_budget_does_not_bring_uncovered_text_into_the_policy(
    covered_gateway, upstream
) -> None:
    upstream.script("up-medium", ok("Hi!", confidence=None), ok("Hi!", confidence=None))
    client = covered_gateway.client()
    raw = client.chat.completions.with_raw_response.create(model="cascade/chain", messages=user("hello"))
    assert raw.headers["x-cascade-tier"] == "uncalibrated"
    raw = client.chat.completions.with_raw_response.create(
        model="cascade", messages=user("hello"), extra_headers={"X-Cascade-Max-Cost-Usd": "0.01"}
    )
    assert raw.headers["x-cascade-tier"] == "uncalibrated"


def test_a_kind_with_a_section_is_covered_and_one_without_is_not(covered_gateway, upstream) -> None:
    upstream.script(
        "up-medium", ok(CALL_AS_CONTENT, confidence=0.95), ok('{"city": "Paris"}', confidence=None)
    )
    client = covered_gateway.client()
    raw = client.chat.completions.with_raw_response.create(
        model="cascade", messages=user("hello"), tools=TOOLS
    )
    assert raw.headers["x-cascade-tier"] == "balanced"  # the tool-call section
    raw = client.chat.completions.with_raw_response.create(
        model="cascade",
        messages=user("What is 23 + 19? Answer in JSON."),
        response_format={"type": "json_object"},
    )
    assert raw.headers["x-cascade-tier"] == "uncalibrated"  # numbers, but no structured-output section


def test_the_responses_api_is_covered_by_its_translated_chat_body(covered_gateway, upstream) -> None:
    upstream.script("up-medium", ok("Hello there.", confidence=None))
    raw = covered_gateway.client().responses.with_raw_response.create(model="cascade", input="hello")
    assert raw.headers["x-cascade-tier"] == "uncalibrated"
    assert raw.parse().output_text == "Hello there."


@pytest.mark.parametrize(
    ("body", "kind", "minimum", "expected"),
    [
        ({"messages": user("What is 23 + 19?")}, "text", 2, True),
        ({"messages": user("Name 3 colours.")}, "text", 2, False),
        ({"messages": user("hello")}, "text", 0, True),
        # The last user message decides, whatever came before.
        (
            {"messages": [*user("What is 2 + 2?"), {"role": "assistant", "content": "4"}, *user("thanks")]},
            "text",
            2,
            False,
        ),
        ({"messages": user([{"type": "text", "text": "What is 6 * 7?"}])}, "text", 2, True),
        ({"prompt": "12 + 30 ="}, "text", 2, True),
        ({"messages": "nope"}, "text", 1, False),
        ({"messages": user("What is 23 + 19?")}, "structured_output", 2, False),
        ({"messages": user("hello")}, "tool_call", 2, True),  # the sections below have tool_call
    ],
)
def test_covered(body, kind, minimum, expected) -> None:
    coverage = CoverageConfig(min_numbers=minimum, otherwise="m")
    assert covered(coverage, body, kind, {"tool_call": object()}) is expected


def test_the_other_model_must_be_configured(make_settings: Any) -> None:
    with pytest.raises(ConfigError, match=r"coverage.otherwise 'nowhere' is not a configured model"):
        make_settings(coverage={"min_numbers": 2, "otherwise": "nowhere"})
    with pytest.raises(ConfigError, match="min_numbers"):
        make_settings(coverage={"min_numbers": -1, "otherwise": "medium"})
