"""The reserved worst case of a request: every completion cap the upstream may honour, times the
choices it generates, over every stage of the route, prompt bounded by the body size."""

from __future__ import annotations

from typing import Any

import pytest
from gateway_testkit import model_configs

from gateway.app import build_gateway
from gateway.config import Settings
from gateway.requests import DEFAULT_COMPLETION_BOUND, completion_bound, generated_choices, parse_request
from gateway.routing import RoutePlan
from policies.schema import Route


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


def settings(prices: dict[str, dict[str, float]]) -> Settings:
    models = model_configs("http://127.0.0.1:9/v1")
    for name, price in prices.items():
        models[name]["price"] = price
    return Settings.from_mapping({"models": models, "policy": "/nonexistent.json"})


def test_reservation_counts_every_stage_every_choice_and_the_flat_price_when_larger() -> None:
    gateway = build_gateway(
        settings(
            {
                "small": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
                "large": {"input_per_mtok": 10.0, "output_per_mtok": 30.0, "per_query_usd": 5.0},
            }
        )
    )
    raw = b'{"model": "small", "messages": [{"role": "user", "content": "hi"}], "n": 3, "max_tokens": 100}'
    request = parse_request(raw, "chat")
    small_only = (len(raw) * 1.0 + 3 * 100 * 2.0) / 1e6
    passthrough = RoutePlan(tier="passthrough", policy=None, route=None, model="small")
    assert gateway.reserve_estimate(passthrough, request, len(raw)) == pytest.approx(small_only)
    chain = Route(weight=1.0, models=["small", "large"], thresholds=[0.5])
    cascade = RoutePlan(tier="balanced", policy=None, route=chain)
    # large: 5 USD flat (charged when an answer reports no usage) beats its token worst case
    assert gateway.reserve_estimate(cascade, request, len(raw)) == pytest.approx(small_only + 5.0)
