"""The router a policy carries: built from its ``router`` section, and the hybrid tier's direct rule."""

from __future__ import annotations

import numpy as np

from policies.route_features import CHEAP, feature_dims
from policies.router import LinearRouter, ServedRoute, goes_direct, served_route
from policies.routing_schema import RouterSpec, TierRouting


def test_a_router_built_from_its_section_gives_the_sections_probabilities() -> None:
    dims = feature_dims(CHEAP)
    spec = RouterSpec(
        features=CHEAP,
        models=["small", "large"],
        cost_usd=[0.001, 0.01],
        coef=[[0.01] * dims, [-0.02] * dims],
        intercept=[0.0, 2.0],
    )
    router = LinearRouter.from_spec(spec)
    x = np.linspace(0.0, 1.0, dims)
    expected = 1 / (1 + np.exp(-(np.array(spec.coef) @ x + np.array(spec.intercept))))
    assert router.models == ("small", "large")
    assert np.allclose(router.probabilities(x), expected)


def test_a_request_goes_direct_only_strictly_below_the_cut_one_at_a_time_or_many() -> None:
    assert goes_direct(0.29, 0.3) is True
    assert goes_direct(0.3, 0.3) is False
    assert goes_direct(np.array([0.1, 0.3, 0.5]), 0.3).tolist() == [True, False, False]


def test_each_routed_tier_serves_the_route_its_mechanism_chooses() -> None:
    router = LinearRouter("cheap-v1", ("small", "large"), np.zeros((2, 1)), np.zeros(2))
    cost = [0.001, 0.01]
    sure, unsure = np.array([0.9, 0.95]), np.array([0.2, 0.95])
    routed = TierRouting(mechanism="routed", price_weight=10.0)
    assert served_route(routed, router, sure, cost) == ServedRoute(("small",), (), "routed", 0.9)
    assert served_route(routed, router, unsure, cost).models == ("large",)
    hybrid = TierRouting(mechanism="hybrid", models=["small", "large"], threshold=0.6, direct_below=0.3)
    assert served_route(hybrid, router, sure, cost) == ServedRoute(
        ("small", "large"), (0.6,), "hybrid_cascade", 0.9
    )
    assert served_route(hybrid, router, unsure, cost) == ServedRoute(("large",), (), "hybrid_direct", 0.2)
    alone = TierRouting(mechanism="hybrid", models=["large"])
    assert served_route(alone, router, sure, cost) == ServedRoute(("large",), (), "hybrid_direct", 0.95)
