"""Routed and route-then-cascade tiers: the route a request takes when its tier has ``routing``.

``cascade calibrate --mechanisms`` may give a tier ``routing`` (``policies.routing_schema.TierRouting``) and
the policy a ``router`` (per-model linear correctness models on a feature set,
``policies.route_features``). For such a tier, after ``RoutePlanner.plan`` chose the tier, this module
computes the request's features, the router's probabilities, and replaces the plan's route:

* ``routed``: the one model of ``argmax p - price_weight * cost`` (``policies.router.routed_choice``,
  its costs' order computed once per router);
* ``hybrid``: straight to the strong model when ``p_cheap < direct_below``, else the cascade
  cheap -> strong at the tier's calibrated threshold.

The reservation, the engine, the live relay and the charges then run the chosen route as any
other: a routed request is a one-stage route, so a stream is relayed live from its first token.

Features: ``cheap-v1`` costs tens of microseconds and runs inline. ``minilm-v1`` costs tens of
milliseconds of CPU, so it runs in a bounded process pool (real parallelism, the event loop never
waits on it). When the pool is saturated (``max_pending`` embeddings in flight), slow (over
``timeout_s``), still warming up or broken, the request is served by the tier's calibrated cascade
(its ``routes``), counted as ``fallback``: a request is never refused or delayed for want of a
feature. The pool is warmed at boot and replaced when a worker dies (``gateway.routing.embedding_pool``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from prometheus_client import Counter, Gauge, Histogram

from gateway.config.drift import ROUTER_DRIFT_MODEL
from gateway.routing.embedding_pool import READY, EmbeddingPool
from gateway.routing.tier_choice import RoutePlan
from gateway.telemetry.metrics import GatewayMetrics
from gateway.telemetry.trace_context import REQUEST_TRACE
from gateway.wire.requests import ParsedRequest
from policies.route_features import CHEAP, MINILM, SparseFeatures, cheap_terms, request_parts
from policies.router import LinearRouter, cost_order, goes_direct, ordered_choice
from policies.routing_schema import RouterSpec, TierRouting
from policies.schema import Route

_FEATURE_BUCKETS = (0.00001, 0.00003, 0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1)
_PROBABILITY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


class RouterRuntime:
    """Applies a tier's ``routing`` to a plan (module docstring); exports its metrics."""

    def __init__(self, metrics: GatewayMetrics, embeddings: EmbeddingPool | None = None):
        registry = metrics.registry
        self._child = metrics.child
        self._drift = metrics.drift
        self.decisions = Counter(
            "cascade_router_decisions",
            "Requests of routed tiers by tier, mechanism taken (routed, hybrid_direct, hybrid_cascade, "
            "fallback) and first model called.",
            ["tier", "mechanism", "model"],
            registry=registry,
        )
        self.fallbacks = Counter(
            "cascade_router_fallbacks",
            "Requests of routed tiers served by the tier's cascade because the features were not "
            "computed (saturated, timeout, warming, error).",
            ["tier", "reason"],
            registry=registry,
        )
        self.feature_seconds = Histogram(
            "cascade_router_feature_seconds",
            "Time to compute a request's router features, by feature set.",
            ["features"],
            buckets=_FEATURE_BUCKETS,
            registry=registry,
        )
        self.probability = Histogram(
            "cascade_router_probability",
            "The router's predicted probability of the model it decided on (routed: the chosen "
            "model; hybrid: the cheap model), by tier.",
            ["tier"],
            buckets=_PROBABILITY_BUCKETS,
            registry=registry,
        )
        self.embedding_restarts = Counter(
            "cascade_embedding_pool_restarts",
            "Restarts of the minilm-v1 embedding pool after a worker died or failed to warm up.",
            registry=registry,
        )
        self.embedding_warm = Gauge(
            "cascade_embedding_pool_warm",
            "1 when the minilm-v1 embedding workers have loaded the model and take embeddings, "
            "0 while they warm up, are down or were not started.",
            registry=registry,
        )
        self.embeddings = embeddings or EmbeddingPool(restarts=self.embedding_restarts)
        self.embedding_warm.set_function(lambda: float(self.embeddings.state == READY))
        # Per router section: (section, router, its costs as floats, their cost_order), built once.
        self._routers: dict[int, tuple[RouterSpec, LinearRouter, list[float], list[int]]] = {}
        # The one-stage (or hybrid) routes a router chooses, built once: (models, thresholds) -> Route.
        self._routes: dict[tuple[tuple[str, ...], tuple[float, ...]], Route] = {}
        # The metric children a decision updates, found once per label set (as the request log's):
        # (tier, mechanism, model) -> (decisions, probability); feature set -> feature_seconds.
        self._decided: dict[tuple[str, str, str], tuple[Any, Any]] = {}
        self._timers: dict[str, Any] = {}

    @staticmethod
    def applies(plan: RoutePlan) -> bool:
        """Whether ``plan``'s tier is routed (cheap to ask on every request)."""
        policy = plan.policy
        if policy is None or policy.router is None or plan.route is None:
            return False
        tier = policy.tiers.get(plan.tier)
        return tier is not None and tier.routing is not None

    def _linear(self, spec: RouterSpec) -> tuple[RouterSpec, LinearRouter, list[float], list[int]]:
        cached = self._routers.get(id(spec))
        if cached is not None and cached[0] is spec:
            return cached
        costs = [float(cost) for cost in spec.cost_usd]
        found = (spec, LinearRouter.from_spec(spec), costs, cost_order(costs))
        if len(self._routers) >= 8:
            self._routers.pop(next(iter(self._routers)))
        self._routers[id(spec)] = found
        return found

    def _route(self, models: tuple[str, ...], thresholds: tuple[float, ...]) -> Route:
        """The route of ``models`` at ``thresholds``, one object per distinct choice (never mutated)."""
        key = (models, thresholds)
        route = self._routes.get(key)
        if route is None:
            if len(self._routes) >= 64:
                self._routes.pop(next(iter(self._routes)))
            route = Route.model_construct(weight=1.0, models=list(models), thresholds=list(thresholds))
            self._routes[key] = route
        return route

    def _timer(self, feature_set: str) -> Any:
        """The ``cascade_router_feature_seconds`` child of ``feature_set``."""
        timer = self._timers.get(feature_set)
        if timer is None:
            timer = self._timers[feature_set] = self._child(self.feature_seconds, feature_set)
        return timer

    def _cheap(self, request: ParsedRequest, kind: str) -> SparseFeatures:
        """The request's ``cheap-v1`` features (``features``), computed inline: no coroutine."""
        text, n_tools, kind = request_parts(_chat_body(request), kind)
        started = time.perf_counter()
        features = cheap_terms(text, n_tools, kind)
        self._timer(CHEAP).observe(time.perf_counter() - started)
        return features

    async def features(
        self, feature_set: str, request: ParsedRequest, kind: str
    ) -> tuple[SparseFeatures | np.ndarray | None, str]:
        """The request's vector of ``feature_set`` (``cheap-v1``: its nonzero entries, a
        ``SparseFeatures``; ``np.asarray`` of it is the dense vector) and ``"ok"``, or ``(None, why)``
        when the embedding pool could not compute it (``EmbeddingPool.embed``); timed in
        ``cascade_router_feature_seconds``. The learning sampler computes a sampled request's
        features with it too, off the request path."""
        if feature_set == CHEAP:
            return self._cheap(request, kind), "ok"
        assert feature_set == MINILM
        text, _, _ = request_parts(_chat_body(request), kind)
        started = time.perf_counter()
        traced = REQUEST_TRACE.get()  # the request's trace (gateway.telemetry.tracing), None when off
        span = traced.embedding(MINILM) if traced is not None else None
        features, why = await self.embeddings.embed(text)
        if span is not None:
            span.end(None if why == "ok" else why)
        self._timer(MINILM).observe(time.perf_counter() - started)
        return features, why

    def apply_inline(self, plan: RoutePlan, request: ParsedRequest) -> RoutePlan | None:
        """``apply`` without a coroutine when the tier's router reads ``cheap-v1`` (computed inline,
        module docstring); None when its features come from the embedding pool (``await apply``)."""
        policy = plan.policy
        assert policy is not None and policy.router is not None
        if policy.router.features != CHEAP:
            return None
        return self._routed(plan, self._cheap(request, plan.kind))

    async def apply(self, plan: RoutePlan, request: ParsedRequest) -> RoutePlan:
        """``plan`` with the route its tier's routing chooses (unchanged, marked fallback, when the
        features could not be computed)."""
        routed = self.apply_inline(plan, request)  # cheap-v1: tens of microseconds, no await
        if routed is not None:
            return routed
        assert plan.policy is not None and plan.policy.router is not None
        features, why = await self.features(plan.policy.router.features, request, plan.kind)
        if features is None:
            self._child(self.fallbacks, plan.tier, why).inc()
            self._child(
                self.decisions, plan.tier, "fallback", plan.route.models[0] if plan.route else ""
            ).inc()
            plan.mechanism = "fallback"
            return plan
        return self._routed(plan, features)

    def _routed(self, plan: RoutePlan, features: SparseFeatures | np.ndarray) -> RoutePlan:
        """``plan`` with the route its tier's routing chooses from the request's ``features``,
        counted in the decision metrics."""
        policy = plan.policy
        assert policy is not None and policy.router is not None
        routing = policy.tiers[plan.tier].routing
        assert routing is not None
        _, router, costs, order = self._linear(policy.router)
        if isinstance(features, SparseFeatures):  # plain Python over the router's coefficients
            p: list[float] = router.sparse_probabilities(features)
        else:
            p = router.probabilities(features).tolist()
        models, thresholds, mechanism, probability = _decide(routing, router.models, p, costs, order)
        plan.route = self._route(models, thresholds)
        plan.mechanism = mechanism
        plan.router_probability = probability
        plan.router_features = features
        children = self._decided.get((plan.tier, mechanism, models[0]))
        if children is None:
            children = self._decided[(plan.tier, mechanism, models[0])] = (
                self._child(self.decisions, plan.tier, mechanism, models[0]),
                self._child(self.probability, plan.tier),
            )
        children[0].inc()
        children[1].observe(probability)
        self._drift.observe(policy.policy_id, plan.tier, ROUTER_DRIFT_MODEL, probability, plan.kind)
        return plan

    def close(self) -> None:
        """Stop the embedding processes."""
        self.embeddings.close()


def _decide(
    routing: TierRouting, models: tuple[str, ...], p: list[float], costs: list[float], order: list[int]
) -> tuple[tuple[str, ...], tuple[float, ...], str, float]:
    """``(models, thresholds, mechanism, probability)`` of the route ``routing`` chooses from the
    router's probabilities ``p`` of its ``models`` (``costs`` and their ``cost_order``: module
    docstring; the same choices as ``policies.router.served_route``)."""
    if routing.mechanism == "routed":
        assert routing.price_weight is not None
        index = ordered_choice(p, costs, order, routing.price_weight)
        return (models[index],), (), "routed", p[index]
    if routing.models is not None and len(routing.models) == 1:
        return (routing.models[0],), (), "hybrid_direct", p[models.index(routing.models[0])]
    assert routing.models is not None and routing.threshold is not None
    assert routing.direct_below is not None
    cheap, strong = routing.models
    probability = p[models.index(cheap)]
    if goes_direct(probability, routing.direct_below):
        return (strong,), (), "hybrid_direct", probability
    return (cheap, strong), (routing.threshold,), "hybrid_cascade", probability


def _chat_body(request: ParsedRequest) -> dict[str, Any]:
    """The request as a chat body (a legacy completion's prompt as its one user message)."""
    return request.body if request.api == "chat" else {"messages": [_legacy_message(request.body)]}


def _legacy_message(body: dict[str, Any]) -> dict[str, Any]:
    prompt = body.get("prompt")
    return {"role": "user", "content": prompt if isinstance(prompt, str) else ""}
