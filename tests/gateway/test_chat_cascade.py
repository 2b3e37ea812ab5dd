"""Non-streamed chat cascade through the official OpenAI SDK: accept, escalate, chains, mixtures."""

from __future__ import annotations

import random

import pytest

from policies import score_response
from tests.support.scripted_upstream import ok

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def test_accepts_confident_cheap_answer(gateway, upstream) -> None:
    upstream.script("up-small", ok("Paris.", confidence=0.99))
    raw = gateway.client().chat.completions.with_raw_response.create(model="cascade", messages=MESSAGES)
    completion = raw.parse()
    assert completion.choices[0].message.content == "Paris."
    assert completion.model == "small"
    assert completion.choices[0].logprobs is None  # the client did not ask for logprobs
    headers = raw.headers
    assert headers["x-cascade-tier"] == "balanced"
    assert headers["x-cascade-model"] == "small"
    assert headers["x-cascade-models-called"] == "small"
    assert headers["x-cascade-escalated"] == "false"
    assert float(headers["x-cascade-score"]) > 0.5
    assert headers["x-cascade-threshold"] == "0.5"
    assert float(headers["x-cascade-cost-usd"]) == pytest.approx((10 * 0.1 + 5 * 0.2) / 1e6)
    assert float(headers["x-cascade-overhead-ms"]) >= 0
    assert headers["x-cascade-policy"] == gateway.gateway.policy.policy_id
    assert len(headers["x-request-id"]) == 24
    assert "x-cascade-degraded" not in headers
    sent = upstream.calls("up-small")[0].body
    assert sent["model"] == "up-small"
    assert sent["logprobs"] is True and sent["top_logprobs"] == 5


def test_escalates_when_score_below_threshold(gateway, upstream) -> None:
    upstream.script("up-small", ok("Lyon?", confidence=0.3))
    upstream.script("up-large", ok("Paris.", confidence=0.99))
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="cascade/balanced", messages=MESSAGES
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "Paris."
    assert completion.model == "large"
    assert raw.headers["x-cascade-escalated"] == "true"
    assert raw.headers["x-cascade-models-called"] == "small,large"
    assert raw.headers["x-cascade-model"] == "large"
    assert float(raw.headers["x-cascade-score"]) < 0.5
    assert float(raw.headers["x-cascade-cost-usd"]) == pytest.approx(2e-6 + 0.001)
    large_request = upstream.calls("up-large")[0].body
    assert "logprobs" not in large_request  # the final stage is not scored


def test_score_header_equals_policies_score_of_the_cheap_answer(gateway, upstream) -> None:
    upstream.script("up-small", ok("Paris is nice.", confidence=0.8))
    raw = gateway.client().chat.completions.with_raw_response.create(model="cascade", messages=MESSAGES)
    # Recompute the score the calibration side would give the same upstream answer.
    from tests.support.scripted_upstream import _completion

    body = _completion("/v1/chat/completions", upstream.calls("up-small")[0].body, ok("Paris is nice.", 0.8))
    expected = score_response(body, "mean_token_negentropy", 5)
    assert float(raw.headers["x-cascade-score"]) == pytest.approx(expected, rel=1e-5)


def test_client_fields_pass_through_unchanged(gateway, upstream) -> None:
    upstream.script("up-small", ok(confidence=0.99))
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    gateway.client().chat.completions.create(
        model="cascade",
        messages=MESSAGES,
        temperature=0.3,
        max_tokens=17,
        stop=["\n"],
        seed=7,
        user="u1",
        tools=tools,
        response_format={"type": "text"},
        extra_body={"custom_field": {"a": 1}},
    )
    sent = upstream.calls("up-small")[0].body
    assert sent["messages"] == MESSAGES
    assert (sent["temperature"], sent["max_tokens"], sent["stop"], sent["seed"], sent["user"]) == (
        0.3,
        17,
        ["\n"],
        7,
        "u1",
    )
    assert sent["tools"] == tools
    assert sent["response_format"] == {"type": "text"}
    assert sent["custom_field"] == {"a": 1}


def test_logprobs_returned_only_when_asked_and_trimmed(gateway, upstream) -> None:
    upstream.script("up-small", ok("Paris.", confidence=0.99))
    completion = gateway.client().chat.completions.create(
        model="cascade", messages=MESSAGES, logprobs=True, top_logprobs=2
    )
    content = completion.choices[0].logprobs.content
    assert content and all(len(entry.top_logprobs) == 2 for entry in content)
    assert upstream.calls("up-small")[0].body["top_logprobs"] == 5


def test_chain_of_three_escalates_stage_by_stage(gateway, upstream) -> None:
    upstream.script("up-small", ok(confidence=0.3))
    upstream.script("up-medium", ok("medium answer", confidence=0.99))
    raw = gateway.client().chat.completions.with_raw_response.create(model="cascade/chain", messages=MESSAGES)
    assert raw.parse().choices[0].message.content == "medium answer"
    assert raw.headers["x-cascade-models-called"] == "small,medium"
    assert raw.headers["x-cascade-escalated"] == "true"
    assert upstream.calls("up-large") == []

    upstream.script("up-small", ok(confidence=0.3))
    upstream.script("up-medium", ok(confidence=0.3))
    upstream.script("up-large", ok("large answer"))
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="cascade", messages=MESSAGES, extra_headers={"X-Cascade-Tier": "chain"}
    )
    assert raw.parse().choices[0].message.content == "large answer"
    assert raw.headers["x-cascade-models-called"] == "small,medium,large"
    assert raw.headers["x-cascade-tier"] == "chain"


def test_direct_tier_calls_one_model_without_logprobs(gateway, upstream) -> None:
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="cascade/direct", messages=MESSAGES
    )
    assert raw.headers["x-cascade-models-called"] == "large"
    assert raw.headers["x-cascade-score"] == "none"
    assert "logprobs" not in upstream.calls("up-large")[0].body


def test_randomized_mixture_follows_weights(start_gateway, upstream) -> None:
    gateway = start_gateway(rng=random.Random(1234))
    upstream.set_default("up-small", ok(confidence=0.99))
    client = gateway.client()
    first = []
    for _ in range(200):
        raw = client.chat.completions.with_raw_response.create(model="cascade/mix", messages=MESSAGES)
        first.append(raw.headers["x-cascade-models-called"].split(",")[0])
    share_small = first.count("small") / len(first)
    # 50/50 mixture: 200 draws land within 0.35..0.65 with probability > 0.99999.
    assert 0.35 < share_small < 0.65
    assert set(first) == {"small", "large"}


def test_budget_header_picks_best_envelope_point_within_budget(gateway, upstream) -> None:
    client = gateway.client()
    upstream.set_default("up-small", ok(confidence=0.3))
    raw = client.chat.completions.with_raw_response.create(
        model="large", messages=MESSAGES, extra_headers={"X-Cascade-Max-Cost-Usd": "0.0005"}
    )
    assert raw.headers["x-cascade-tier"] == "budget"
    assert raw.headers["x-cascade-models-called"] == "small,large"
    raw = client.chat.completions.with_raw_response.create(
        model="cascade", messages=MESSAGES, extra_headers={"X-Cascade-Max-Cost-Usd": "0.00002"}
    )
    assert raw.headers["x-cascade-models-called"] == "small"
    raw = client.chat.completions.with_raw_response.create(
        model="cascade", messages=MESSAGES, extra_headers={"X-Cascade-Max-Cost-Usd": "0.000001"}
    )
    assert raw.headers["x-cascade-models-called"] == "small"
    assert raw.headers["x-cascade-over-budget"] == "true"
    raw = client.chat.completions.with_raw_response.create(
        model="cascade", messages=MESSAGES, extra_headers={"X-Cascade-Max-Cost-Usd": "1"}
    )
    assert raw.headers["x-cascade-models-called"] == "large"


def test_configured_model_name_is_plain_passthrough(gateway, upstream) -> None:
    raw = gateway.client().chat.completions.with_raw_response.create(model="medium", messages=MESSAGES, n=2)
    assert raw.parse().model == "medium"
    assert raw.headers["x-cascade-tier"] == "passthrough"
    sent = upstream.calls("up-medium")[0].body
    assert "logprobs" not in sent and sent["n"] == 2
    assert upstream.calls("up-small") == []


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def test_tool_call_answer_has_no_score_and_follows_on_missing_score(gateway, upstream) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    upstream.script("up-small", ok(None, tool_calls=[call]))
    upstream.script("up-large", ok(None, tool_calls=[call]))
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="cascade", messages=MESSAGES, tools=TOOLS
    )
    assert raw.headers["x-cascade-score"] == "none"
    assert raw.headers["x-cascade-models-called"] == "small,large"  # on_missing_score: escalate
    assert raw.headers["x-cascade-escalation-reason"] == "tool_call_only"
    assert raw.parse().choices[0].message.tool_calls[0].function.name == "f"


def test_tool_call_accepted_when_policy_accepts_missing_scores(
    start_gateway, make_settings, write_policy, upstream
) -> None:
    gateway = start_gateway(make_settings(write_policy(on_missing_score="accept")))
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    upstream.script("up-small", ok(None, tool_calls=[call]))
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="cascade", messages=MESSAGES, tools=TOOLS
    )
    assert raw.headers["x-cascade-models-called"] == "small"
    assert raw.headers["x-cascade-escalated"] == "false"
    assert raw.headers["x-cascade-escalation-reason"] == "none"


async def test_async_client_accepts_and_escalates(gateway, upstream) -> None:
    upstream.script("up-small", ok(confidence=0.99), ok(confidence=0.3))
    async with gateway.async_client() as client:
        first = await client.chat.completions.with_raw_response.create(model="cascade", messages=MESSAGES)
        second = await client.chat.completions.with_raw_response.create(model="cascade", messages=MESSAGES)
    assert first.headers["x-cascade-escalated"] == "false"
    assert second.headers["x-cascade-escalated"] == "true"


def test_legacy_completions_cascade(gateway, upstream) -> None:
    upstream.script("up-small", ok("Paris", confidence=0.3))
    upstream.script("up-large", ok("Paris!", confidence=0.99))
    raw = gateway.client().completions.with_raw_response.create(model="cascade", prompt="Capital of France:")
    completion = raw.parse()
    assert completion.choices[0].text == "Paris!"
    assert completion.model == "large"
    assert raw.headers["x-cascade-escalated"] == "true"
    assert upstream.calls("up-small")[0].body["logprobs"] == 5
    assert upstream.calls("up-small")[0].path == "/v1/completions"
