"""Bound metric children (gateway.telemetry.metrics.bound_child) update exactly what prometheus_client's
own ``inc``/``observe`` would: the exported samples of a bound and a plain child agree."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gateway.telemetry.metrics import GatewayMetrics, bound_child


def _samples(
    registry: CollectorRegistry, prefix: str
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name.replace(prefix, ""), tuple(sorted(s.labels.items()))): s.value
        for metric in registry.collect()
        for s in metric.samples
        if s.name.startswith(prefix) and not s.name.endswith("_created")
    }


def test_a_bound_counter_and_histogram_export_what_the_plain_ones_do() -> None:
    registry = CollectorRegistry()
    buckets = (0.001, 0.01, 0.1, 1, 10)
    plain_c = Counter("plain_c", "c", ["tier"], registry=registry)
    bound_c = Counter("bound_c", "c", ["tier"], registry=registry)
    plain_h = Histogram("plain_h", "h", ["tier"], buckets=buckets, registry=registry)
    bound_h = Histogram("bound_h", "h", ["tier"], buckets=buckets, registry=registry)
    counter, histogram = bound_child(bound_c.labels("a")), bound_child(bound_h.labels("a"))
    assert type(counter).__name__ == "_BoundCounter" and type(histogram).__name__ == "_BoundHistogram"
    values = [0.0, 0.001, 0.0010001, 0.5, 1, 10, 11, 1e9, -1.0, math.inf, 3]
    for value in values:
        histogram.observe(value)
        plain_h.labels("a").observe(value)
        if value >= 0 and math.isfinite(value):
            counter.inc(value)
            plain_c.labels("a").inc(value)
    counter.inc()
    plain_c.labels("a").inc()
    assert _samples(registry, "bound_") == _samples(registry, "plain_")
    with pytest.raises(ValueError):
        counter.inc(-1)


def test_the_gateways_children_are_bound_and_other_metrics_left_as_they_are() -> None:
    metrics = GatewayMetrics()
    assert type(metrics.child(metrics.requests, "t", "accepted", "chat")).__name__ == "_BoundCounter"
    assert type(metrics.child(metrics.overhead, "chat")).__name__ == "_BoundHistogram"
    gauge = Gauge("g", "g", ["x"], registry=CollectorRegistry())
    assert bound_child(gauge.labels("y")) is not None and not hasattr(bound_child(gauge.labels("y")), "child")
    metrics.child(metrics.requests, "t", "accepted", "chat").inc()
    assert (
        metrics.registry.get_sample_value(
            "cascade_requests_total", {"tier": "t", "outcome": "accepted", "endpoint": "chat"}
        )
        == 1
    )
