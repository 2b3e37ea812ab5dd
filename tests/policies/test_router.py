"""The router a policy carries: built from its ``router`` section, and the hybrid tier's direct rule."""

from __future__ import annotations

import random
import re
import zlib

import numpy as np

from policies.route_features import CHEAP, HASH_DIMS, KINDS, cheap_features, cheap_terms, feature_dims
from policies.router import LinearRouter, ServedRoute, goes_direct, routed_choice, served_route
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


def _numpy_cheap_features(text: str, n_tools: int, kind: str) -> np.ndarray:
    """The ``cheap-v1`` vector as numpy computed it before the plain-Python form (the reference)."""
    vector = np.zeros(feature_dims(CHEAP))
    tokens = re.findall(r"\w+|[^\w\s]", text.lower())
    counts: dict[int, int] = {}
    previous = ""
    for token in tokens:
        for gram in (token, f"{previous} {token}"):
            bucket = zlib.crc32(gram.encode()) % HASH_DIMS
            counts[bucket] = counts.get(bucket, 0) + 1
        previous = token
    if counts:
        values = np.log1p(np.array(list(counts.values()), dtype=np.float64))
        vector[list(counts)] = values / np.sqrt(values @ values)
    lengths = (np.log1p(len(text)), np.log1p(len(tokens)), bool(n_tools), np.log1p(n_tools))
    vector[HASH_DIMS : HASH_DIMS + 4] = lengths
    if kind in KINDS:
        vector[HASH_DIMS + 4 + KINDS.index(kind)] = 1.0
    return vector


def _numpy_routed_choice(p: np.ndarray, cost: list[float], price_weight: float) -> int:
    costs = np.asarray(cost)
    order = np.lexsort((np.arange(costs.size), costs))
    return int(order[int(np.argmax((p - price_weight * costs)[order]))])


def test_the_request_paths_plain_python_router_decides_as_the_numpy_one_on_many_requests() -> None:
    """cheap-v1 features and the linear router in plain Python (the gateway's request path) against
    numpy's dense vector and matrix product: equal to rounding, and the same model chosen."""
    rng = random.Random(7)
    words = ["what", "is", "the", "capital", "of", "France", "why", "tool_call", "2", "+", "?", "é", "a\x1db"]
    dims = feature_dims(CHEAP)
    coef = np.array([[rng.gauss(0, 1) for _ in range(dims)] for _ in range(3)])
    router = LinearRouter(CHEAP, ("small", "mid", "large"), coef, np.array([0.3, -0.1, 0.2]))
    cost = [0.0001, 0.0005, 0.0005]
    for _ in range(400):
        pool = words if rng.random() < 0.5 else words[:-2]  # half ASCII: tokenized from its bytes
        text = " ".join(rng.choice(pool) for _ in range(rng.randint(0, 120)))
        n_tools, kind = rng.randint(0, 3), rng.choice([*KINDS, "other"])
        sparse = cheap_terms(text, n_tools, kind)
        dense = _numpy_cheap_features(text, n_tools, kind)
        np.testing.assert_allclose(np.asarray(sparse), dense, rtol=1e-14, atol=1e-15)
        exact = cheap_features(text, n_tools, kind)
        np.testing.assert_array_equal(np.asarray(sparse), exact)
        assert sparse.terms == {int(i): float(exact[i]) for i in np.flatnonzero(exact)}  # the same entries
        p_plain = router.sparse_probabilities(sparse)
        p_numpy = router.probabilities(dense)
        np.testing.assert_allclose(p_plain, p_numpy, rtol=1e-12, atol=1e-15)
        for price_weight in (0.0, 300.0, 3000.0):
            expected = _numpy_routed_choice(p_numpy, cost, price_weight)
            assert routed_choice(p_plain, cost, price_weight) == expected
    assert routed_choice([0.5, 0.5, 0.5], [2e-5, 1e-5, 1e-5], 0.0) == 1  # a tie: the cheaper, then the first
