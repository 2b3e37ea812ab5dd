"""The ``prefix`` commit rule against the scripted upstream: the order of what the client sees, the
decision on the first tokens, what is charged for a cancelled cheap stage, and where it does not apply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from localpool.manifest import load_manifest
from money import Price
from money.charges import sent_bound
from tests.support.gateway_testkit import RunningGateway, model_configs
from tests.support.policy_files import write_policy
from tests.support.scripted_upstream import ScriptedUpstream, error, ok

MESSAGES = [{"role": "user", "content": "How many apples are left?"}]
LONG = " ".join(f"w{i}" for i in range(12))  # 12 tokens, one per streamed chunk
SMALL_PRICE = Price(input_per_mtok=0.1, output_per_mtok=0.2)  # tests.support.gateway_testkit


def prefix_gateway(
    start_gateway: Any, make_settings: Any, tmp_path: Path, commit: dict[str, Any] | None = None
) -> RunningGateway:
    """A gateway whose ``balanced`` tier (small -> large, threshold 0.5) decides streams on 3 tokens."""
    rule = commit or {"rule": "prefix", "tokens": 3}
    policy = write_policy(tmp_path / "prefix.json", {"balanced": {"commit": rule}})
    return start_gateway(make_settings(policy))


def stream_chat(gateway: RunningGateway, **extra: Any) -> tuple[httpx.Response, list[dict[str, Any]]]:
    """A streamed chat request: the response and its ``data:`` objects."""
    body = {"model": "cascade", "messages": MESSAGES, "stream": True, **extra}
    with gateway.http.stream("POST", "/v1/chat/completions", json=body, timeout=20) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: {")]
    return response, [orjson.loads(line[6:]) for line in lines]


def text_of(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))


def test_accepted_prefix_starts_the_response_before_the_cheap_stream_ends(
    start_gateway, make_settings, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    gateway = prefix_gateway(start_gateway, make_settings, tmp_path)
    upstream.script("up-small", ok(LONG, confidence=0.99, chunk_delay_s=0.15))
    body = {"model": "cascade", "messages": MESSAGES, "stream": True}
    with gateway.http.stream("POST", "/v1/chat/completions", json=body, timeout=20) as response:
        lines = response.iter_lines()
        first = next(line for line in lines if line.startswith("data: {"))
        # The client holds the start of the answer while the cheap model is still writing it.
        assert "up-small" not in upstream.completed
        assert upstream.streams[0].finished is False
        assert response.headers["x-cascade-commit"] == "prefix"
        assert response.headers["x-cascade-commit-tokens"] == "3"
        assert response.headers["x-cascade-escalated"] == "false"
        assert response.headers["x-cascade-model"] == "small"
        assert float(response.headers["x-cascade-score"]) > 0.5
        rest = [orjson.loads(line[6:]) for line in lines if line.startswith("data: {")]
    chunks = [orjson.loads(first[6:]), *rest]
    assert text_of(chunks) == LONG
    assert all(c["model"] == "small" for c in chunks)
    facts = chunks[-1]["cascade"]
    assert facts["commit"] == {"rule": "prefix", "tokens": 3}
    assert facts["models_called"] == ["small"]
    assert all(c["choices"][0].get("logprobs") is None for c in chunks if c["choices"])  # not asked
    sent = upstream.calls("up-small")[0].body
    assert sent["stream"] is True and sent["logprobs"] is True and sent["top_logprobs"] == 5
    assert upstream.calls("up-large") == []


def test_rejected_prefix_cancels_the_cheap_stream_and_streams_the_final_model(
    start_gateway, make_settings, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    gateway = prefix_gateway(start_gateway, make_settings, tmp_path)
    upstream.script("up-small", ok(LONG, confidence=0.3, chunk_delay_s=0.1))
    upstream.script("up-large", ok("Seven apples are left.", usage=(20, 6)))
    response, chunks = stream_chat(gateway)
    assert response.headers["x-cascade-escalated"] == "true"
    assert response.headers["x-cascade-escalation-reason"] == "low_score"
    assert response.headers["x-cascade-commit-tokens"] == "3"
    assert text_of(chunks) == "Seven apples are left."
    assert {c["model"] for c in chunks} == {"large"}
    assert upstream.wait_for(lambda: "up-small" in upstream.cancelled)
    assert upstream.streams[0].finished is False
    # The cancelled stage reported no usage: it is charged its worst case (money.charges).
    worst = sent_bound(SMALL_PRICE, orjson.dumps(upstream.calls("up-small")[0].body)).usd
    facts = chunks[-1]["cascade"]
    assert facts["models_called"] == ["small", "large"]
    assert facts["cost_usd"] == pytest.approx(worst + 0.001)
    assert gateway.sample("cascade_cancelled_tokens_total", tier="balanced", model="small") == 3
    # The cancelled call answered: it is no upstream error.
    assert gateway.sample("cascade_upstream_requests_total", model="small", status="2xx") == 1
    assert gateway.sample("cascade_upstream_requests_total", model="small", status="error") == 0
    assert gateway.sample("cascade_commit_position_tokens_count", tier="balanced") == 1
    assert (
        gateway.sample("cascade_time_to_first_token_seconds_count", tier="balanced", outcome="escalated") == 1
    )


def test_answer_ending_before_the_decision_point_is_decided_whole(
    start_gateway, make_settings, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    gateway = prefix_gateway(start_gateway, make_settings, tmp_path, {"rule": "prefix", "tokens": 8})
    upstream.script("up-small", ok("Seven apples.", confidence=0.99))
    response, chunks = stream_chat(gateway)
    assert response.headers["x-cascade-escalated"] == "false"
    assert response.headers["x-cascade-commit-tokens"] == "none"  # decided on the whole answer
    assert text_of(chunks) == "Seven apples."
    assert chunks[-1]["cascade"]["cost_usd"] > 0
    # A whole answer cut at a cap the client did not set escalates, as under ``buffer``.
    upstream.script("up-small", ok("Seven apples", confidence=0.99, finish_reason="length"))
    upstream.script("up-large", ok("Seven apples are left."))
    response, chunks = stream_chat(gateway)
    assert response.headers["x-cascade-escalation-reason"] == "truncated"
    assert text_of(chunks) == "Seven apples are left."


def test_line_boundary_decides_at_the_end_of_the_first_line(
    start_gateway, make_settings, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    rule = {"rule": "prefix", "tokens": 10, "boundary": "line"}
    gateway = prefix_gateway(start_gateway, make_settings, tmp_path, rule)
    upstream.script("up-small", ok("Three plus four\nis seven so Answer: 7", confidence=0.99))
    response, chunks = stream_chat(gateway)
    assert response.headers["x-cascade-commit-tokens"] == "3"  # "Three", " plus", " four\nis"
    assert text_of(chunks) == "Three plus four\nis seven so Answer: 7"


def test_cheap_stream_failing_before_the_decision_escalates(
    start_gateway, make_settings, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    gateway = prefix_gateway(start_gateway, make_settings, tmp_path)
    upstream.script("up-small", error(500), error(500), error(500))
    upstream.script("up-large", ok("Seven."))
    response, chunks = stream_chat(gateway)
    assert response.headers["x-cascade-escalation-reason"] == "upstream_error"
    assert text_of(chunks) == "Seven."


def test_a_content_refusal_of_the_cheap_stream_is_returned_not_escalated(
    start_gateway, make_settings, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    gateway = prefix_gateway(start_gateway, make_settings, tmp_path)
    filtered = {"message": "filtered", "type": None, "param": "prompt", "code": "content_filter"}
    upstream.script("up-small", error(400, body={"error": filtered}))
    body = {"model": "cascade", "messages": MESSAGES, "stream": True}
    response = gateway.http.post("/v1/chat/completions", json=body, timeout=20)
    assert response.status_code == 400 and response.json()["error"]["code"] == "content_filter"
    assert response.json()["error"]["upstream"]["model"] == "small"
    assert upstream.calls("up-large") == []


def test_non_streamed_and_tool_requests_keep_the_buffer_rule(
    start_gateway, make_settings, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    gateway = prefix_gateway(start_gateway, make_settings, tmp_path)
    upstream.script("up-small", ok("Seven.", confidence=0.99))
    whole = gateway.client().chat.completions.with_raw_response.create(model="cascade", messages=MESSAGES)
    assert "x-cascade-commit" not in whole.headers
    assert "stream" not in upstream.calls("up-small")[0].body
    tool = {"type": "function", "function": {"name": "count", "parameters": {"type": "object"}}}
    upstream.script("up-small", ok("Seven.", confidence=0.99))
    response, chunks = stream_chat(gateway, tools=[tool])
    assert "x-cascade-commit" not in response.headers
    assert "stream" not in upstream.calls("up-small")[1].body
    assert text_of(chunks) == "Seven."


def test_anthropic_and_responses_streams_through_a_prefix_tier(
    start_gateway, make_settings, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    gateway = prefix_gateway(start_gateway, make_settings, tmp_path)
    upstream.script("up-small", ok(LONG, confidence=0.99))
    client = gateway.anthropic_client()
    with client.messages.stream(model="cascade", max_tokens=64, messages=MESSAGES) as stream:
        assert stream.response.headers["x-cascade-commit"] == "prefix"
        text = "".join(stream.text_stream)
    assert text == LONG
    upstream.script("up-small", ok(LONG, confidence=0.3))
    upstream.script("up-large", ok("Seven apples are left."))
    with gateway.client().responses.stream(model="cascade", input=MESSAGES) as events:
        deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
        final = events.get_final_response()
    assert "".join(deltas) == "Seven apples are left."
    assert final.model_extra["cascade"]["escalated"] is True


def test_a_committed_stream_gives_the_client_the_alternatives_it_asked_for(
    start_gateway, make_settings, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    gateway = prefix_gateway(start_gateway, make_settings, tmp_path)
    upstream.script("up-small", ok(LONG, confidence=0.99))
    response, chunks = stream_chat(gateway, logprobs=True, top_logprobs=2)
    assert response.headers["x-cascade-commit-tokens"] == "3"
    entries = [
        e
        for c in chunks
        if c["choices"] and c["choices"][0].get("logprobs")
        for e in c["choices"][0]["logprobs"]["content"]
    ]
    assert len(entries) == 12  # every token of the answer, the held prefix included
    assert {len(e["top_logprobs"]) for e in entries} == {2}  # the scorer asked 5
    assert upstream.calls("up-small")[0].body["top_logprobs"] == 5


def test_prefix_stage_sends_the_cheap_member_what_calibration_collected(
    start_gateway, make_settings, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    # The word-problem member of the hosted prefix policy (tests/e2e/test_prefix_replay_local.py), as
    # `cascade replay --stream` asks it: its defaults (system message, 320-token cap), the client's
    # temperature and usage, the scorer's logprobs; nothing else (no sampler or cache field), so the
    # prefix scored live is scored on the answer calibration recorded.
    defaults = load_manifest().members["qwen0.5b-steps"].request_defaults.model_dump(exclude_none=True)
    models = model_configs(upstream.base_url)
    models["small"]["request_defaults"] = defaults
    policy = write_policy(tmp_path / "prefix.json", {"balanced": {"commit": {"rule": "prefix", "tokens": 3}}})
    gateway = start_gateway(make_settings(policy, models=models))
    upstream.script("up-small", ok(LONG, confidence=0.99))
    response, _ = stream_chat(gateway, temperature=0.0, stream_options={"include_usage": True})
    assert response.headers["x-cascade-commit"] == "prefix"
    assert upstream.calls("up-small")[0].body == {
        "model": "up-small",
        "messages": [{"role": "system", "content": defaults["system"]}, *MESSAGES],
        "max_tokens": 320,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "logprobs": True,
        "top_logprobs": 5,
    }
