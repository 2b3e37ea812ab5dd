"""The reserved worst case of a request: every completion cap the upstream may honour, times the
choices it generates for every prompt, over every stage of the route, prompt bounded by the body
size; and the same bound for the sampler's shadow calls and a cancelled call. Properties over
generated request bodies (tests/money/charge_support.py) check it against an honest upstream."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.api.app import build_gateway
from gateway.config.learning import LearningConfig
from gateway.config.settings import Settings
from gateway.learning.answers import Sample
from gateway.learning.budget import ShadowBudget
from gateway.learning.shadow import ShadowRunner
from gateway.routing.tier_choice import RoutePlan
from gateway.stages.bodies import upstream_body
from gateway.telemetry.metrics import GatewayMetrics
from gateway.wire.requests import parse_request
from money.charges import (
    DEFAULT_COMPLETION_BOUND,
    SENT_FIELDS_BYTES,
    completion_bound,
    generated_choices,
    sent_bound,
)
from policies import build_policy
from policies.schema import Route
from tests.money.charge_support import honest_usage, honoured_caps, request_bodies
from tests.support.gateway_testkit import POLICY_DOCUMENT, model_configs
from traffic.judges.text import ExactJudge


@pytest.mark.parametrize(
    ("body", "bound"),
    [
        ({}, DEFAULT_COMPLETION_BOUND),
        ({"max_tokens": 12}, 12),
        ({"max_completion_tokens": 1, "max_tokens": 5000}, 5000),  # the larger cap the upstream may honour
        ({"max_completion_tokens": 700, "max_tokens": 5}, 700),
        ({"max_tokens": 5, "n_predict": 9000}, 9000),  # llama.cpp reads n_predict first
        ({"n_predict": 5000.0}, 5000),
        ({"n_predict": -1}, DEFAULT_COMPLETION_BOUND),  # "unbounded" is no cap: the default bound
        ({"max_tokens": True}, DEFAULT_COMPLETION_BOUND),
    ],
)
def test_completion_bound_is_the_largest_cap_any_field_sets(body: dict[str, Any], bound: int) -> None:
    assert completion_bound(body) == bound


@pytest.mark.parametrize(
    ("body", "choices"),
    [({}, 1), ({"n": 60}, 60), ({"n": 2, "best_of": 5}, 5), ({"best_of": 3.5}, 4), ({"n": None}, 1)],
)
def test_generated_choices_is_max_of_n_and_best_of(body: dict[str, Any], choices: int) -> None:
    assert generated_choices(body) == choices


def make_settings(prices: dict[str, dict[str, float]]) -> Settings:
    models = model_configs("http://127.0.0.1:9/v1")
    for name, price in prices.items():
        models[name]["price"] = price
    return Settings.from_mapping({"models": models, "policy": "/nonexistent.json"})


def test_reservation_counts_every_stage_every_choice_and_the_flat_price_when_larger() -> None:
    gateway = build_gateway(
        make_settings(
            {
                "small": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
                "large": {"input_per_mtok": 10.0, "output_per_mtok": 30.0, "per_query_usd": 5.0},
            }
        )
    )
    raw = b'{"model": "small", "messages": [{"role": "user", "content": "hi"}], "n": 3, "max_tokens": 100}'
    request = parse_request(raw, "chat")
    # Every byte the gateway may add to what it sends (the upstream id, SENT_FIELDS_BYTES) counts.
    sent = len(raw) + len("up-small") + SENT_FIELDS_BYTES
    small_only = (sent * 1.0 + 3 * 100 * 2.0) / 1e6
    passthrough = RoutePlan(tier="passthrough", policy=None, route=None, model="small")
    assert gateway.reserve_estimate(passthrough, request, len(raw)) == pytest.approx(small_only)
    chain = Route(weight=1.0, models=["small", "large"], thresholds=[0.5])
    cascade = RoutePlan(tier="balanced", policy=None, route=chain)
    # large: 5 USD flat (charged when an answer reports no usage) beats its token worst case
    assert gateway.reserve_estimate(cascade, request, len(raw)) == pytest.approx(small_only + 5.0)


# Models of every price form, with request defaults that add a system message, a default cap, a
# default n_predict and default tools: what the property tests below route generated requests to.
PROPERTY_MODELS: dict[str, dict[str, Any]] = {
    "tok": {"price": {"input_per_mtok": 1.0, "output_per_mtok": 3.0}},
    "both": {
        "price": {"input_per_mtok": 2.0, "output_per_mtok": 5.0, "per_query_usd": 0.0001},
        "request_defaults": {"system": "Be brief and exact.", "max_tokens": 64},
    },
    "flat": {"price": {"per_query_usd": 0.002}},
    "tooled": {
        "price": {"input_per_mtok": 0.5, "output_per_mtok": 1.5},
        "request_defaults": {
            "n_predict": 128,
            "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}],
        },
    },
}


@pytest.fixture(scope="module")
def property_gateway() -> Any:
    models = {
        name: {"base_url": "http://127.0.0.1:9/v1", "model": f"up-{name}", **config}
        for name, config in PROPERTY_MODELS.items()
    }
    return build_gateway(Settings.from_mapping({"models": models, "policy": "/nonexistent.json"}))


@pytest.fixture(scope="module")
def shadow_runner(property_gateway: Any) -> ShadowRunner:
    """A real ShadowRunner over the property models (plan_call makes no call)."""
    metrics = GatewayMetrics(with_learning=True)
    return ShadowRunner(
        LearningConfig(),
        property_gateway.models,
        5.0,
        property_gateway.pool,
        metrics.learning,
        ExactJudge(),
        ShadowBudget(1.0),
        replica="test",
    )


def honest_cost_usd(gateway: Any, name: str, sent: dict[str, Any], data: st.DataObject) -> float:
    """The most an honest upstream bills for the upstream request ``sent`` to model ``name``."""
    honoured = data.draw(st.sampled_from(honoured_caps(sent)), label=f"{name} honours")
    return float(gateway.models[name].price.cost_usd(*honest_usage(sent, honoured)))


@settings(max_examples=300, deadline=None)
@given(
    request=request_bodies(),
    route=st.permutations(list(PROPERTY_MODELS)).flatmap(
        lambda names: st.integers(1, len(names)).map(lambda k: names[:k])
    ),
    data=st.data(),
)
def test_no_generated_requests_honest_cost_exceeds_its_reservation(
    property_gateway: Any, request: tuple[str, dict[str, Any]], route: list[str], data: st.DataObject
) -> None:
    kind, body = request
    raw = orjson.dumps(body)
    parsed = parse_request(raw, kind)  # type: ignore[arg-type]
    if len(route) == 1:
        plan = RoutePlan("passthrough", None, None, model=route[0])
    else:
        plan = RoutePlan("t", None, Route(weight=1.0, models=route, thresholds=[0.5] * (len(route) - 1)))
    reserved = property_gateway.reserve_estimate(plan, parsed, len(raw))
    true_usd = 0.0
    for stage, name in enumerate(route):
        config = property_gateway.models[name]
        scored = stage < len(route) - 1  # every stage may be called, the scored ones with logprobs
        sent = upstream_body(
            parsed, config.model, top_k=5 if scored else None, stream=False, defaults=config.request_defaults
        )
        cost = honest_cost_usd(property_gateway, name, orjson.loads(sent), data)
        # A call cancelled mid-flight is charged this bound of what it sent.
        assert cost <= sent_bound(config.price, sent).usd * (1 + 1e-12)
        true_usd += cost
    assert true_usd <= reserved * (1 + 1e-12), (true_usd, reserved)


@settings(max_examples=200, deadline=None)
@given(request=request_bodies(), model=st.sampled_from(list(PROPERTY_MODELS)), data=st.data())
def test_no_generated_samples_honest_shadow_cost_exceeds_its_shadow_bound(
    property_gateway: Any,
    shadow_runner: ShadowRunner,
    request: tuple[str, dict[str, Any]],
    model: str,
    data: st.DataObject,
) -> None:
    kind, body = request
    parsed = parse_request(orjson.dumps(body), kind)  # type: ignore[arg-type]
    sample = Sample("q", parsed, build_policy(POLICY_DOCUMENT), "balanced", {}, datetime.now(UTC))
    call = shadow_runner.plan_call(sample, model)
    cost = honest_cost_usd(property_gateway, model, orjson.loads(call.body), data)
    assert cost <= call.bound_usd * (1 + 1e-12), (cost, call.bound_usd)
