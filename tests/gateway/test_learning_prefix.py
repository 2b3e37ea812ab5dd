"""A sampled request on a ``prefix`` tier: the traffic sampler keeps the cheap stage's own answer.

The cheap stage of a prefix tier is streamed; whether it was committed to on its first tokens or
ended before its decision point (decided whole), the sampler receives its scored answer and reuses
it: the cheap model is called once, by the request itself, never again by a shadow call
(docs/traffic.md). Against the scripted upstream's call log and the JSONL traffic store.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from learning_support import learning_block, registry_value

from tests.support.gateway_testkit import RunningGateway, until
from tests.support.policy_files import write_policy
from tests.support.scripted_upstream import ScriptedUpstream, ok
from tests.support.traffic_rows import stored_rows
from traffic.rows import TrafficRow

MESSAGES = [{"role": "user", "content": "How many apples are left?"}]
LONG = " ".join(f"w{i}" for i in range(12))  # 12 tokens, one per streamed chunk


def sampled_prefix_gateway(
    start_gateway: Callable, make_settings: Callable, tmp_path: Path, tokens: int
) -> tuple[RunningGateway, str]:
    """Every request sampled; the ``balanced`` tier (small -> large) decides streams on ``tokens``."""
    url = f"file://{tmp_path / 'traffic.jsonl'}"
    policy = write_policy(
        tmp_path / "prefix.json", {"balanced": {"commit": {"rule": "prefix", "tokens": tokens}}}
    )
    return start_gateway(make_settings(policy, learning=learning_block(url))), url


def stream_chat(gateway: RunningGateway) -> tuple[httpx.Response, list[dict[str, Any]]]:
    """A streamed chat request: the response and its ``data:`` objects."""
    body = {"model": "cascade", "messages": MESSAGES, "stream": True}
    with gateway.http.stream("POST", "/v1/chat/completions", json=body, timeout=20) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: {")]
    return response, [orjson.loads(line[6:]) for line in lines]


def rows_by_model(url: str, count: int) -> dict[str, TrafficRow]:
    """The store's rows by model, once it holds ``count``."""
    found: list[TrafficRow] = []

    def enough() -> bool:
        found[:] = stored_rows(url)
        return len(found) >= count

    assert until(enough, 20.0), f"the store holds {len(found)} rows, expected {count}"
    return {row.model: row for row in found}


def test_a_sampled_committed_prefix_stream_is_kept_whole_and_the_cheap_model_is_not_called_again(
    start_gateway: Callable, make_settings: Callable, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    gateway, url = sampled_prefix_gateway(start_gateway, make_settings, tmp_path, tokens=3)
    upstream.set_default("up-small", ok(LONG, confidence=0.99, usage=(10, 12)))
    upstream.set_default("up-medium", ok("w0", confidence=0.99))
    upstream.set_default("up-large", ok(LONG, confidence=0.99))
    response, chunks = stream_chat(gateway)
    assert response.headers["x-cascade-commit-tokens"] == "3"
    assert response.headers["x-cascade-model"] == "small"

    rows = rows_by_model(url, 3)
    assert set(rows) == {"small", "medium", "large"}
    # The cheap model was called once: the request's own stream, no shadow call.
    (call,) = upstream.calls("up-small")
    assert call.body["stream"] is True
    assert registry_value(gateway.gateway, "cascade_shadow_calls_total", model="small") == 0
    small = rows["small"]
    # The whole streamed answer (every token's logprobs, not the prefix's), its usage and charge,
    # with the score its prefix was committed on.
    assert small.logprobs is not None and len(small.logprobs) == 12
    assert "".join(e["token"] for e in small.logprobs) == LONG
    assert (small.prompt_tokens, small.completion_tokens) == (10, 12)
    assert small.score == pytest.approx(float(response.headers["x-cascade-score"]), rel=1e-5)
    assert small.cost_usd == pytest.approx(chunks[-1]["cascade"]["cost_usd"])
    assert small.correct == 1.0  # the same text as the reference's (large)


def test_a_sampled_prefix_answer_decided_whole_is_kept_and_the_cheap_model_is_not_called_again(
    start_gateway: Callable, make_settings: Callable, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    gateway, url = sampled_prefix_gateway(start_gateway, make_settings, tmp_path, tokens=8)
    upstream.set_default("up-small", ok("Seven apples.", confidence=0.99))
    upstream.set_default("up-medium", ok("Seven apples.", confidence=0.99))
    upstream.set_default("up-large", ok("Seven apples.", confidence=0.99))
    response, chunks = stream_chat(gateway)
    assert response.headers["x-cascade-commit-tokens"] == "none"  # ended before the decision point
    assert response.headers["x-cascade-model"] == "small"

    rows = rows_by_model(url, 3)
    assert len(upstream.calls("up-small")) == 1
    assert registry_value(gateway.gateway, "cascade_shadow_calls_total", model="small") == 0
    small = rows["small"]
    assert small.logprobs and small.score == pytest.approx(
        float(response.headers["x-cascade-score"]), rel=1e-5
    )
    assert small.cost_usd == pytest.approx(chunks[-1]["cascade"]["cost_usd"])
