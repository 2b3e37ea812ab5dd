"""What a sampled request's rows carry for refitting the router: its features and the decision.

``cascade recalibrate`` refits a policy's router on sampled traffic (docs/routing.md, "Learning"):
it needs each sampled query's router features, computed as the gateway computes them when it
routes, beside every pool model's judged answer (the rows). So, when the serving policy has a
router, every sample's rows get ``route`` (``traffic.rows.ROUTE_KEYS``): the feature set's name and
vector, and, for a request of a routed tier, how it was routed (``mechanism``), the models of the
route taken (``models``) and the router's probability behind it (``router_probability``).

A routed request's features are the ones its route was chosen from (no second computation). Any
other sampled request of the policy (a cascade tier's, a fallback's) gets them here, in the
sampler's worker, off the request path: ``cheap-v1`` inline, ``minilm-v1`` through the gateway's
bounded embedding pool (``gateway.routing.routed_tiers.RouterRuntime.features``); when the pool cannot take
it the rows carry no ``route``, and recalibration leaves the query out of the router's refit.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from gateway.learning.answers import Sample
from gateway.wire.requests import ParsedRequest

# ``RouterRuntime.features``: (feature set, request, kind) -> (vector or None, why).
Featurize = Callable[[str, ParsedRequest, str], Awaitable[tuple[Any, str]]]


async def route_record(sample: Sample, featurize: Featurize | None) -> dict[str, Any] | None:
    """The rows' ``route`` of ``sample`` (module docstring), or None without a router or features."""
    spec = sample.policy.router
    if spec is None:
        return None
    routed = sample.routed
    features = routed.features if routed is not None else None
    if features is None and featurize is not None:
        features, _ = await featurize(spec.features, sample.request, sample.kind)
    if features is None:
        return None
    return {
        "features": spec.features,
        "values": [float(v) for v in np.asarray(features, dtype=np.float64)],
        "mechanism": None if routed is None else routed.mechanism,
        "router_probability": None if routed is None else routed.router_probability,
        "models": None if routed is None else list(routed.models),
    }
