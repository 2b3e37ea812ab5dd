"""Learning from routed traffic: a sampled request's rows carry what refitting the router needs.

Through the official OpenAI SDK against the real app, the scripted upstream and the real
PostgreSQL (a private schema per test): the policy has a ``cheap-v1`` router
(tests/support/routed_policy.py). Every pool model gets its judged row as for a cascade request,
and every row carries ``route``: the request's router features (the vector the router read, or,
for a request of a cascade tier, the same features computed by the sampler), how it was routed
and the router's probability behind it (docs/contracts.md, traffic rows).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from learning_support import learning_block, postgres_store_url
from test_learning_sampling import rows_when

from policies.route_features import cheap_features
from tests.support.postgres import drop_schema
from tests.support.routed_policy import EASY, HARD, HYBRID, ROUTED, router_section
from tests.support.scripted_upstream import ok


@pytest.fixture
def store_url() -> Iterator[str]:
    schema = f"learning_routed_{uuid.uuid4().hex[:12]}"
    yield postgres_store_url(schema)
    drop_schema(schema)


@pytest.fixture
def learning_gateway(
    start_gateway: Callable, make_settings: Callable, write_policy: Any, store_url: str
) -> Any:
    policy = write_policy(
        tier_changes={"balanced": {"routing": ROUTED}, "chain": {"routing": HYBRID}}, router=router_section()
    )
    return start_gateway(make_settings(policy=policy, learning=learning_block(store_url)))


def features_of(messages: list[dict[str, str]]) -> list[float]:
    return [float(v) for v in cheap_features(messages[0]["content"], 0, "text")]


def test_a_sampled_routed_request_stores_its_features_route_and_probability(
    learning_gateway: Any, upstream: Any, store_url: str
) -> None:
    for model in ("small", "medium", "large"):
        upstream.set_default(f"up-{model}", ok("4", confidence=0.99))
    reply = learning_gateway.client().chat.completions.with_raw_response.create(
        model="cascade/balanced", messages=HARD
    )
    assert reply.headers["x-cascade-models-called"] == "large"  # routed: "hard" defeats small

    rows = rows_when(store_url, 3)
    request_id = reply.headers["x-request-id"]
    assert set(rows) == {(request_id, m) for m in ("small", "medium", "large")}  # the whole pool judged
    assert {rows[request_id, m].correct for m in ("small", "medium", "large")} == {1.0}
    for row in rows.values():
        assert row.route is not None
        assert row.route["features"] == "cheap-v1" and row.route["mechanism"] == "routed"
        assert row.route["models"] == ["large"]  # the route taken
        assert row.route["router_probability"] == pytest.approx(
            float(reply.headers["x-cascade-router-probability"]), rel=1e-4
        )
        assert row.route["values"] == pytest.approx(features_of(HARD))  # what the router read


def test_a_sampled_request_of_a_cascade_tier_gets_the_features_off_the_request_path(
    learning_gateway: Any, upstream: Any, store_url: str
) -> None:
    for model in ("small", "medium", "large"):
        upstream.set_default(f"up-{model}", ok("4", confidence=0.99))
    client = learning_gateway.client()
    cascade = client.chat.completions.with_raw_response.create(model="cascade/direct", messages=EASY)
    assert "x-cascade-mechanism" not in cascade.headers  # a cascade tier: the router did not run
    hybrid = client.chat.completions.with_raw_response.create(model="cascade/chain", messages=EASY)
    assert hybrid.headers["x-cascade-mechanism"] == "hybrid_cascade"

    rows = rows_when(store_url, 6)
    direct = rows[cascade.headers["x-request-id"], "small"].route
    assert direct is not None and direct["mechanism"] is None and direct["router_probability"] is None
    assert direct["models"] is None
    assert direct["values"] == pytest.approx(features_of(EASY))
    chained = rows[hybrid.headers["x-request-id"], "medium"].route
    assert chained is not None and chained["mechanism"] == "hybrid_cascade"
    assert chained["models"] == ["small", "large"]
    assert chained["router_probability"] == pytest.approx(0.8808, abs=1e-4)  # p_small = sigmoid(2)
