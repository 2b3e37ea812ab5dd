"""Prometheus metrics (docs/contracts.md#metrics), in a per-app registry (never the global one).

Label values come only from small fixed sets: tiers of the loaded policy plus ``budget``,
``passthrough``, ``uncalibrated`` (gateway.config.coverage) and ``none`` (a request rejected before any
route was chosen: bad JSON, unknown tier, bad key); configured model names; fixed outcome and
status-class words; the API edge names (``endpoint``: ``chat``, ``completions``, ...). Never a
user, key or request id.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gateway.config.drift import DriftConfig, ScoreDriftMonitor
from gateway.config.shift_alarm import ShiftAlarmConfig, ShiftAlarms
from policies import Policy
from policies.kinds import kind_tiers

CONTENT_TYPE = CONTENT_TYPE_LATEST
# Whole requests against local models take from milliseconds to minutes.
_REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
# Gateway overhead is meant to be well under a millisecond.
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)
# Time to the first byte of a streamed answer: a live cheap model's first token (~0.3 s on the local
# pool) to a buffered answer of a few hundred tokens (~10 s).
_FIRST_TOKEN_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 30, 60)
# Content tokens held before a prefix decision (policies.commit.CommitRule.tokens).
_POSITION_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256)
_SCORE_BUCKETS = (-5, -2, -1, -0.5, -0.25, 0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1)


class GatewayMetrics:
    """Every metric the gateway exports, registered in ``self.registry``."""

    def __init__(
        self,
        *,
        with_redis: bool = False,
        with_learning: bool = False,
        drift: DriftConfig | None = None,
        shift_alarm: ShiftAlarmConfig | None = None,
    ) -> None:
        """``with_redis``: export ``cascade_redis_up`` (only meaningful when Redis is configured);
        ``with_learning``: export the traffic sampler's metrics (``learning``, when it is enabled);
        ``drift``: the window of the score drift metric (``gateway.config.drift``); ``shift_alarm``:
        the shift alarm's settings (``gateway.config.shift_alarm``)."""
        self.registry = CollectorRegistry(auto_describe=True)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        # Registered in this order, which is the exposition's.
        self._register_request_metrics(self.registry)
        self._register_upstream_metrics(self.registry)
        self._register_policy_metrics(self.registry)
        self._register_health_metrics(self.registry, with_redis=with_redis)
        self._register_client_metrics(self.registry)
        self.drift = ScoreDriftMonitor(drift)
        self.registry.register(self.drift)
        self.shift_alarms = ShiftAlarms(shift_alarm)
        self.registry.register(self.shift_alarms)
        self.learning = LearningMetrics(self.registry, self.child) if with_learning else None

    def _register_request_metrics(self, r: CollectorRegistry) -> None:
        """Requests, escalations, durations, gateway overhead and confidence scores."""
        self.requests = Counter(
            "cascade_requests",
            "Requests by tier, outcome and API endpoint.",
            ["tier", "outcome", "endpoint"],
            registry=r,
        )
        self.requests_by_kind = Counter(
            "cascade_requests_by_kind",
            "Requests by tier and request kind (text, tool_call, structured_output; none if refused early).",
            ["tier", "kind"],
            registry=r,
        )
        self.escalations = Counter(
            "cascade_escalations",
            "Escalations from one model to the next.",
            ["tier", "from_model", "to_model"],
            registry=r,
        )
        self.escalation_reasons = Counter(
            "cascade_escalation_reasons",
            "Escalations by the reason the stage's answer was not kept (gateway/stages/answer_review.py).",
            ["tier", "model", "reason"],
            registry=r,
        )
        self.invalid_answers = Counter(
            "cascade_invalid_answers",
            "Answers that failed a structural check (final stages included), by check.",
            ["tier", "model", "check"],
            registry=r,
        )
        self.request_duration = Histogram(
            "cascade_request_duration_seconds",
            "Whole request duration.",
            ["tier", "endpoint"],
            buckets=_REQUEST_BUCKETS,
            registry=r,
        )
        self.overhead = Histogram(
            "cascade_overhead_seconds",
            "Gateway time excluding upstream calls.",
            ["endpoint"],
            buckets=_OVERHEAD_BUCKETS,
            registry=r,
        )
        self.confidence = Histogram(
            "cascade_confidence_score",
            "Confidence score of scored answers.",
            ["tier", "model"],
            buckets=_SCORE_BUCKETS,
            registry=r,
        )
        self._register_stream_metrics(r)

    def _register_stream_metrics(self, r: CollectorRegistry) -> None:
        """Streamed requests: time to the first token, and the prefix commit rule's positions."""
        self.first_token = Histogram(
            "cascade_time_to_first_token_seconds",
            "Streamed requests: time from the request to the first byte of the answer's body.",
            ["tier", "outcome"],
            buckets=_FIRST_TOKEN_BUCKETS,
            registry=r,
        )
        self.commit_position = Histogram(
            "cascade_commit_position_tokens",
            "Prefix commit rule: content tokens of the cheap stage held when it was decided.",
            ["tier"],
            buckets=_POSITION_BUCKETS,
            registry=r,
        )
        self.cancelled_tokens = Counter(
            "cascade_cancelled_tokens",
            "Prefix commit rule: content tokens a cheap stage had streamed when it was cancelled.",
            ["tier", "model"],
            registry=r,
        )

    def _register_upstream_metrics(self, r: CollectorRegistry) -> None:
        """Upstream call attempts, their durations, spend and tokens; content-policy refusals."""
        self.upstream_requests = Counter(
            "cascade_upstream_requests",
            "Upstream call attempts by status class.",
            ["model", "status"],
            registry=r,
        )
        self.content_refusals = Counter(
            "cascade_content_refusals",
            "Content-policy refusals by an upstream, by what the gateway did: returned to the client, "
            "escalated to the next stage, or served the degraded answer (upstream_errors.content_policy).",
            ["tier", "model", "action"],
            registry=r,
        )
        self.upstream_duration = Histogram(
            "cascade_upstream_duration_seconds",
            "Upstream call attempt duration.",
            ["model"],
            buckets=_REQUEST_BUCKETS,
            registry=r,
        )
        self.cost = Counter("cascade_cost_usd", "Upstream spend in USD.", ["tier", "model"], registry=r)
        self.tokens = Counter("cascade_tokens", "Upstream tokens.", ["model", "kind"], registry=r)

    def _register_policy_metrics(self, r: CollectorRegistry) -> None:
        """The loaded policy, its expected escalation rates and failed loads."""
        self.policy_info = Gauge(
            "cascade_policy_info", "The loaded policy (value 1).", ["policy_id"], registry=r
        )
        self.expected_escalation_rate = Gauge(
            "cascade_expected_escalation_rate",
            "Escalation rate the policy expects per tier (held-out mean when the policy has one).",
            ["tier"],
            registry=r,
        )
        self.expected_by_kind = Gauge(
            "cascade_expected_by_kind",
            "What the policy expects per tier and request kind: measure quality, cost_usd or "
            "escalation_rate (held-out mean when the policy has one, else in-sample).",
            ["tier", "kind", "measure"],
            registry=r,
        )
        self.policy_reload_failures = Counter(
            "cascade_policy_reload_failures",
            "Policy loads that failed (last good policy kept).",
            registry=r,
        )

    def _register_health_metrics(self, r: CollectorRegistry, *, with_redis: bool) -> None:
        """Upstream probes, Redis (when configured) and requests cut by the shutdown."""
        self.upstream_up = Gauge(
            "cascade_upstream_up",
            "1 if the upstream answered the last background probe (GET /models, status < 500), else 0.",
            ["model"],
            registry=r,
        )
        self.circuit_state = Gauge(
            "cascade_upstream_circuit_state",
            "The model's circuit breaker: 0 closed, 1 open (skipped), 2 half-open (one probe let through).",
            ["model"],
            registry=r,
        )
        self.redis_up: Gauge | None = None
        if with_redis:
            self.redis_up = Gauge(
                "cascade_redis_up", "1 if Redis answered the last check, else 0.", registry=r
            )
        self.shutdown_interrupted = Counter(
            "cascade_shutdown_interrupted_requests",
            "Requests still open when the shutdown grace ended (ended with an error, spend settled).",
            registry=r,
        )

    def _register_client_metrics(self, r: CollectorRegistry) -> None:
        """Client keys: spend limits reached, spend not checked in Redis, refused keys."""
        self.budget_rejections = Counter(
            "cascade_budget_rejections",
            "Requests refused because a key's spend limit was reached.",
            registry=r,
        )
        self.rate_limit_rejections = Counter(
            "cascade_rate_limit_rejections",
            "Requests refused because a key's rate limit was reached, by limit (requests, tokens).",
            ["limit"],
            registry=r,
        )
        self.spend_fallbacks = Counter(
            "cascade_spend_fallback",
            "Keyed requests whose spend could not be checked in Redis, by reason "
            "(timeout, error, down, epoch: counted in process; refused: 503 by config).",
            ["reason"],
            registry=r,
        )
        self.auth_failures = Counter(
            "cascade_auth_failures",
            "Requests refused for their client key, by reason (missing, unknown, throttled).",
            ["reason"],
            registry=r,
        )
        for reason in ("missing", "unknown", "throttled"):
            self.auth_failures.labels(reason)  # both series exist from the start (alert on a rise)
        self.limits_degraded = Gauge(
            "cascade_limits_degraded",
            "1 while this replica decides spend and rate limits in process, counting on from what Redis "
            "last returned (Redis silent past budgets.outage_after_s: gateway.keys.outage), else 0.",
            registry=r,
        )
        self.limits_degraded_entered = Counter(
            "cascade_limits_degraded_entered",
            "Times this replica entered degraded mode (a pause shorter than the outage rule never does).",
            registry=r,
        )
        self.replicas_live = Gauge(
            "cascade_replicas_live",
            "Replicas heard from in Redis in the last 5 s, as this replica last read it (0: not known); "
            "in degraded mode each admits at most 1/this of a key's headroom.",
            registry=r,
        )
        self.spend_unsynced = Gauge(
            "cascade_spend_unsynced_usd",
            "Spend counted in process that Redis does not hold yet (written back when it answers).",
            registry=r,
        )

    def child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, memoized: label sets are few and the hot path asks often. A
        counter's or histogram's child comes bound (``bound_child``: its ``inc``/``observe`` go
        straight to the values it exports).

        Not for metrics that get ``clear()``-ed (the policy gauges).
        """
        key = (id(metric), labels)
        try:
            return self._children[key]
        except KeyError:
            found = self._children[key] = bound_child(metric.labels(*labels))
            return found

    def policy_loaded(self, policy: Policy) -> None:
        """Publish the loaded policy's id and what it expects per tier (and per kind section)."""
        self.policy_info.clear()
        self.policy_info.labels(policy.policy_id).set(1)
        self.expected_escalation_rate.clear()
        for name, tier in policy.tiers.items():
            self.expected_escalation_rate.labels(name).set(tier.expected.promise()[2])
        self.expected_by_kind.clear()
        for kind, name, tier in kind_tiers(policy):
            cost, quality, escalation = tier.expected.promise()
            for measure, value in (("quality", quality), ("cost_usd", cost), ("escalation_rate", escalation)):
                self.expected_by_kind.labels(name, kind, measure).set(value)
        self.drift.reset(policy)
        self.shift_alarms.reset(policy)

    def render(self) -> bytes:
        """The Prometheus text exposition of this registry."""
        return generate_latest(self.registry)


class LearningMetrics:
    """The traffic sampler's metrics (gateway.learning), in the gateway's registry.

    Labels: ``tier`` as elsewhere; ``model`` a configured name; ``judge`` a judge name; ``reason``
    and ``outcome`` fixed words (docs/contracts.md#metrics).
    """

    def __init__(self, registry: CollectorRegistry, child: Any) -> None:
        """``child``: the owner's memoized ``labels`` lookup (``GatewayMetrics.child``)."""
        r = registry
        self.child = child
        self.sampled = Counter(
            "cascade_learning_sampled",
            "Cascade requests drawn for a sample (after they were answered).",
            ["tier"],
            registry=r,
        )
        self.dropped = Counter(
            "cascade_learning_dropped",
            "Samples given up, by reason (queue_full, spend_cap, store_error, shutdown, error).",
            ["reason"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "cascade_learning_queue_depth", "Samples waiting for their shadow calls.", registry=r
        )
        self.rows_written = Counter(
            "cascade_learning_rows_written", "Traffic rows the store accepted.", registry=r
        )
        self.store_up = Gauge(
            "cascade_learning_store_up",
            "0 from a failed write to the traffic store until a write succeeds, else 1.",
            registry=r,
        )
        self.shadow_calls = Counter(
            "cascade_shadow_calls",
            "Shadow calls by outcome (ok, failed, timeout, cancelled).",
            ["model", "outcome"],
            registry=r,
        )
        self.shadow_cost = Counter(
            "cascade_shadow_cost_usd",
            "Upstream spend of shadow calls in USD (never a client's).",
            ["model"],
            registry=r,
        )
        self.shadow_spend_window = Gauge(
            "cascade_shadow_spend_window_usd",
            "Shadow spend (settled and reserved) in the last hour, against learning.max_shadow_usd_per_hour.",
            registry=r,
        )
        self.shadow_spend_cap = Gauge(
            "cascade_shadow_spend_cap_usd",
            "learning.max_shadow_usd_per_hour: the cap of cascade_shadow_spend_window_usd.",
            registry=r,
        )
        self.judge_outcomes = Counter(
            "cascade_judge_outcomes",
            "Labels by outcome (agree, disagree, undecided, error, no_reference).",
            ["judge", "outcome"],
            registry=r,
        )
        self.judge_cost = Counter(
            "cascade_judge_cost_usd", "Spend of judges that call a model (llm) in USD.", ["judge"], registry=r
        )


class _BoundCounter:
    """A labelled counter's child with ``inc`` on its value: what ``Counter.inc`` does without
    re-checking, on every call, that the child has its labels (it has: ``labels`` made it)."""

    __slots__ = ("_value", "child")

    def __init__(self, child: Counter) -> None:
        self.child = child
        self._value = child._value

    def inc(self, amount: float = 1) -> None:
        """Add ``amount`` (non-negative, as ``Counter.inc`` requires)."""
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self._value.inc(amount)


class _BoundHistogram:
    """A labelled histogram's child whose ``observe`` finds the bucket by bisection: the bucket
    ``Histogram.observe`` finds by scanning (the first bound at or above the value)."""

    __slots__ = ("_bounds", "_buckets", "_sum", "child")

    def __init__(self, child: Histogram) -> None:
        self.child = child
        self._sum = child._sum
        self._buckets = child._buckets
        self._bounds = list(child._upper_bounds)

    def observe(self, amount: float) -> None:
        """Count ``amount`` in its bucket and the sum (a NaN as ``Histogram.observe`` counts it)."""
        if amount != amount:
            self.child.observe(amount)
            return
        self._sum.inc(amount)
        self._buckets[bisect_left(self._bounds, amount)].inc(1)


def bound_child(child: Any) -> Any:
    """A counter's or histogram's child as ``_BoundCounter``/``_BoundHistogram`` (the same values,
    updated the same way, fewer calls per update; prometheus_client's internals, checked by
    tests/gateway/test_metrics_binding.py); any other metric's child as it is."""
    if type(child) is Counter and hasattr(child, "_value"):
        return _BoundCounter(child)
    if type(child) is Histogram and hasattr(child, "_buckets") and hasattr(child, "_upper_bounds"):
        return _BoundHistogram(child)
    return child
