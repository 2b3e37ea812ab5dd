"""The router a policy carries: built from its ``router`` section, and the hybrid tier's direct rule."""

from __future__ import annotations

import numpy as np

from policies.route_features import CHEAP, feature_dims
from policies.router import LinearRouter, goes_direct
from policies.routing_schema import RouterSpec


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
