"""docs/contracts.md#policy-file: a ``fallback`` tier serves its first model that answers, unscored,
and goes on to the next only when a call fails (an error, a timeout, a late first token), on chat,
Responses and Messages, streamed and not, through the official SDKs."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

import pytest

from gateway.commands.policy import tier_lines
from policies import build_policy
from tests.support.gateway_testkit import POLICY_DOCUMENT, model_configs
from tests.support.policy_files import policy_document
from tests.support.scripted_upstream import ScriptedUpstream, error, ok

QUESTION = "What is the capital of France?"
MESSAGES = [{"role": "user", "content": QUESTION}]
FALLBACK_TIER = {
    "mechanism": "fallback",
    "objective": {"min_quality": 0.5},
    "routes": [{"models": ["small", "large"]}],
    "expected": {"cost_usd": 0.0001, "quality": 0.5, "escalation_rate": 0.05},
}


@pytest.fixture
def fallback_gateway(
    start_gateway: Callable[..., Any],
    make_settings: Callable[..., Any],
    write_policy: Callable[..., Any],
    upstream: ScriptedUpstream,
) -> Any:
    """The gateway with tier ``reliable``: fallback small -> large; small has a 0.2 s first-token
    deadline."""
    tiers = {**copy.deepcopy(POLICY_DOCUMENT["tiers"]), "reliable": FALLBACK_TIER}
    configs = model_configs(upstream.base_url)
    configs["small"]["first_token_timeout_s"] = 0.2
    return start_gateway(make_settings(policy=write_policy(tiers=tiers), models=configs))


def _chat(gateway: Any, stream: bool) -> tuple[dict[str, str], str]:
    """A chat request to the fallback tier: its headers and its text."""
    client = gateway.client().chat.completions.with_raw_response
    raw = client.create(model="cascade/reliable", messages=MESSAGES, stream=stream)
    if not stream:
        return dict(raw.headers), raw.parse().choices[0].message.content
    text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    return dict(raw.headers), text


def _responses(gateway: Any, stream: bool) -> tuple[dict[str, str], str]:
    """A Responses request to the fallback tier: its headers and its text."""
    client = gateway.client().responses.with_raw_response
    raw = client.create(model="cascade/reliable", input=QUESTION, stream=stream)
    if not stream:
        return dict(raw.headers), raw.parse().output_text
    done = [e for e in raw.parse() if e.type == "response.output_text.done"]
    return dict(raw.headers), done[0].text


def _messages(gateway: Any, stream: bool) -> tuple[dict[str, str], str]:
    """A Messages request (the anthropic SDK) to the fallback tier: its headers and its text."""
    client = gateway.anthropic_client().messages.with_raw_response
    raw = client.create(model="cascade/reliable", max_tokens=64, messages=MESSAGES, stream=stream)
    if not stream:
        return dict(raw.headers), raw.parse().content[0].text
    deltas = [e.delta.text for e in raw.parse() if e.type == "content_block_delta"]
    return dict(raw.headers), "".join(deltas)


APIS = {"chat": _chat, "responses": _responses, "messages": _messages}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", list(APIS))
def test_a_fallback_tier_serves_its_first_model_unscored(
    fallback_gateway, upstream: ScriptedUpstream, api: str, stream: bool
) -> None:
    upstream.script("up-small", ok("Paris.", confidence=0.1))  # a low score: nothing is scored
    headers, text = APIS[api](fallback_gateway, stream)

    assert text == "Paris."
    assert headers["x-cascade-model"] == "small"
    assert headers["x-cascade-escalated"] == "false"
    assert headers["x-cascade-score"] == "none"
    (call,) = upstream.calls("up-small")
    assert "logprobs" not in call.body and "top_logprobs" not in call.body
    assert upstream.calls("up-large") == []


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", list(APIS))
def test_a_fallback_tier_fails_over_on_an_error(
    fallback_gateway, upstream: ScriptedUpstream, api: str, stream: bool
) -> None:
    upstream.script("up-small", error(503), error(503), error(503))  # the call and both retries
    upstream.script("up-large", ok("Paris, from large."))
    headers, text = APIS[api](fallback_gateway, stream)

    assert text == "Paris, from large."
    assert headers["x-cascade-models-called"] == "small,large"
    assert headers["x-cascade-escalation-reason"] == "upstream_error"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", list(APIS))
def test_a_fallback_tier_fails_over_on_a_slow_first_token(
    fallback_gateway, upstream: ScriptedUpstream, released: threading.Event, api: str, stream: bool
) -> None:
    upstream.script("up-small", ok("Paris, late.", hold_first=released))
    upstream.script("up-large", ok("Paris, from large."))
    headers, text = APIS[api](fallback_gateway, stream)

    assert text == "Paris, from large."
    assert headers["x-cascade-models-called"] == "small,large"
    assert headers["x-cascade-escalation-reason"] == "slow_first_token"
    assert float(headers["x-cascade-cost-bound-usd"]) > 0  # small's cancelled call: no bill read
    assert (
        fallback_gateway.sample(
            "cascade_escalation_reasons_total", tier="reliable", model="small", reason="slow_first_token"
        )
        == 1
    )


def test_a_fallback_tier_whose_last_model_fails_answers_its_error(
    fallback_gateway, upstream: ScriptedUpstream
) -> None:
    upstream.script("up-small", error(503), error(503), error(503))
    upstream.script("up-large", error(503), error(503))
    response = fallback_gateway.http.post(
        "/v1/chat/completions", json={"model": "cascade/reliable", "messages": MESSAGES}
    )

    assert response.status_code == 502
    assert response.json()["error"]["type"] == "upstream_error"
    assert len(upstream.calls("up-small")) == 3 and len(upstream.calls("up-large")) == 2


def test_policy_show_names_a_fallback_tier() -> None:
    tiers = {**copy.deepcopy(POLICY_DOCUMENT["tiers"]), "reliable": FALLBACK_TIER}
    document = build_policy(policy_document(tiers=tiers)).model_dump(mode="json")

    lines = {line.split(":")[0]: line for line in tier_lines(document["tiers"])}

    assert "1x small -> large (fallback)" in lines["tier reliable"]
    assert "(fallback)" not in lines["tier balanced"]
