"""Routed and route-then-cascade tiers served through the app (gateway.routing.routed_tiers).

Through the app with the official openai SDK and the scripted upstream. The policy's router reads
the ``cheap-v1`` features; its coefficients make the word "hard" (its hashed bucket) drive the small
model's predicted correctness to ~0, so an easy and a hard prompt take different routes: a routed
tier sends the easy one to ``small`` and the hard one to ``large`` (one call each, the other model
never called); a hybrid tier cascades the easy one and sends the hard one straight to ``large``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway_testkit import until
from tests.support.routed_policy import EASY, HARD, HYBRID, ROUTED, minilm_policy, router_section
from tests.support.scripted_upstream import ok


@pytest.fixture
def routed_gateway(start_gateway: Any, make_settings: Any, write_policy: Any) -> Any:
    policy: Path = write_policy(
        tier_changes={"balanced": {"routing": ROUTED}, "chain": {"routing": HYBRID}},
        router=router_section(),
    )
    return start_gateway(make_settings(policy=policy))


def test_a_routed_tier_calls_only_the_model_the_router_picks(routed_gateway: Any, upstream: Any) -> None:
    upstream.set_default("up-small", ok("4", confidence=0.2))  # a low score: a cascade would escalate
    upstream.set_default("up-large", ok("x^3/3", confidence=0.99))
    client = routed_gateway.client()

    easy = client.chat.completions.with_raw_response.create(model="cascade/balanced", messages=EASY)
    assert easy.headers["x-cascade-models-called"] == "small"  # routed: no score, no escalation
    assert easy.headers["x-cascade-mechanism"] == "routed"
    assert float(easy.headers["x-cascade-router-probability"]) == pytest.approx(
        1 / (1 + math.exp(-2)), rel=1e-4
    )
    assert easy.headers["x-cascade-score"] == "none"

    hard = client.chat.completions.with_raw_response.create(model="cascade/balanced", messages=HARD)
    assert hard.headers["x-cascade-models-called"] == "large"
    assert hard.headers["x-cascade-model"] == "large"
    assert hard.parse().choices[0].message.content == "x^3/3"
    assert len(upstream.calls("up-small")) == 1 and len(upstream.calls("up-large")) == 1
    assert "logprobs" not in upstream.calls("up-large")[0].body  # a one-stage route is not scored


def test_a_hybrid_tier_sends_the_sure_failures_straight_to_the_strong_model(
    routed_gateway: Any, upstream: Any
) -> None:
    upstream.set_default("up-small", ok("4", confidence=0.99))
    upstream.set_default("up-large", ok("x^3/3", confidence=0.99))
    client = routed_gateway.client()

    hard = client.chat.completions.with_raw_response.create(model="cascade/chain", messages=HARD)
    assert hard.headers["x-cascade-mechanism"] == "hybrid_direct"
    assert hard.headers["x-cascade-models-called"] == "large"
    assert float(hard.headers["x-cascade-router-probability"]) < 0.01  # p_small on a hard prompt

    easy = client.chat.completions.with_raw_response.create(model="cascade/chain", messages=EASY)
    assert easy.headers["x-cascade-mechanism"] == "hybrid_cascade"
    assert easy.headers["x-cascade-models-called"] == "small"  # confident: accepted by the cascade
    assert easy.headers["x-cascade-threshold"] == "0.5"
    assert easy.headers["x-cascade-score"] != "none"
    assert upstream.calls("up-medium") == []  # the tier's own routes (small -> medium -> large) unused


def test_a_hybrid_cascade_still_escalates_a_low_score(routed_gateway: Any, upstream: Any) -> None:
    upstream.script("up-small", ok("5", confidence=0.2))
    upstream.script("up-large", ok("4", confidence=0.99))
    reply = routed_gateway.client().chat.completions.with_raw_response.create(
        model="cascade/chain", messages=EASY
    )
    assert reply.headers["x-cascade-models-called"] == "small,large"
    assert reply.headers["x-cascade-escalated"] == "true"


def test_a_routed_stream_is_relayed_live_from_the_chosen_model(routed_gateway: Any, upstream: Any) -> None:
    upstream.script("up-large", ok("one two three four", confidence=0.99, chunk_delay_s=0.05))
    stream = routed_gateway.client().chat.completions.create(
        model="cascade/balanced", messages=HARD, stream=True
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.replace(" ", "") == "onetwothreefour"
    (call,) = upstream.calls("up-large")
    assert call.body["stream"] is True  # relayed live, not bought whole and replayed
    assert upstream.calls("up-small") == []
    facts = [c.model_extra["cascade"] for c in chunks if c.model_extra and "cascade" in c.model_extra]
    assert facts and facts[-1]["mechanism"] == "routed" and facts[-1]["model"] == "large"


def test_decisions_are_counted_per_tier_mechanism_and_model(routed_gateway: Any, upstream: Any) -> None:
    upstream.set_default("up-small", ok("4", confidence=0.99))
    upstream.set_default("up-large", ok("x", confidence=0.99))
    client = routed_gateway.client()
    for messages in (EASY, HARD, HARD):
        client.chat.completions.create(model="cascade/balanced", messages=messages)
    client.chat.completions.create(model="cascade/chain", messages=HARD)
    client.chat.completions.create(model="cascade/direct", messages=HARD)  # not a routed tier
    samples = {
        (s.labels["tier"], s.labels["mechanism"], s.labels["model"]): s.value
        for s in routed_gateway.metrics()["cascade_router_decisions"].samples
        if s.name == "cascade_router_decisions_total"
    }
    assert samples == {
        ("balanced", "routed", "small"): 1.0,
        ("balanced", "routed", "large"): 2.0,
        ("chain", "hybrid_direct", "large"): 1.0,
    }


def test_a_saturated_embedding_pool_serves_the_tiers_cascade(
    start_gateway: Any, make_settings: Any, write_policy: Any, upstream: Any
) -> None:
    running = start_gateway(make_settings(policy=minilm_policy(write_policy)))
    running.gateway.router_runtime.embeddings.max_pending = 0  # every embedding refused: saturated
    upstream.script("up-small", ok("4", confidence=0.99))
    reply = running.client().chat.completions.with_raw_response.create(
        model="cascade/balanced", messages=HARD
    )
    assert reply.headers["x-cascade-mechanism"] == "fallback"
    assert reply.headers["x-cascade-router-probability"] == "none"
    assert reply.headers["x-cascade-models-called"] == "small"  # the tier's cascade small -> large
    assert running.sample("cascade_router_fallbacks_total", tier="balanced", reason="saturated") == 1.0


def test_a_minilm_router_is_warm_once_the_replica_is_ready(
    start_gateway: Any, make_settings: Any, write_policy: Any, upstream: Any
) -> None:
    running = start_gateway(make_settings(policy=minilm_policy(write_policy)))
    assert until(lambda: running.readiness().status_code == 200, timeout_s=90.0)  # the model loads
    pool = running.gateway.router_runtime.embeddings
    (worker,) = running.readiness().json()["embeddings"]["workers"]
    assert worker != os.getpid()  # a worker process of its own
    assert running.sample("cascade_embedding_pool_warm") == 1.0
    pool.timeout_s = 30.0  # on a loaded machine: the point is the route, not the embedding's speed
    upstream.set_default("up-small", ok("4", confidence=0.99))
    reply = running.client().chat.completions.with_raw_response.create(
        model="cascade/balanced", messages=EASY
    )
    assert reply.headers["x-cascade-mechanism"] == "routed"  # the first request after readiness
    assert reply.headers["x-cascade-models-called"] == "small"
    assert until(lambda: pool.pending == 0, timeout_s=5.0)
