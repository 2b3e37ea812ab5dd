"""The metric-name checks the deploy tests rely on reject what Prometheus would not find."""

from __future__ import annotations

from deploy_support import metric_names, resolve, scrape_families, selector_labels

EXPOSITION = """\
# HELP cascade_requests_total Requests.
# TYPE cascade_requests_total counter
cascade_requests_total{tier="balanced",outcome="accepted"} 3.0
# HELP cascade_overhead_seconds Overhead.
# TYPE cascade_overhead_seconds histogram
cascade_overhead_seconds_bucket{le="0.01"} 1.0
cascade_overhead_seconds_bucket{le="+Inf"} 1.0
cascade_overhead_seconds_count 1.0
cascade_overhead_seconds_sum 0.002
# HELP cascade_redis_up Redis.
# TYPE cascade_redis_up gauge
cascade_redis_up 1.0
"""


def test_metric_names_skip_labels_strings_and_recording_rules() -> None:
    expr = (
        'sum by (tier) (rate(cascade_requests_total{outcome=~"cascade_fake|x"}[5m]))'
        " / on (tier) cascade:expected:max + up"
    )
    assert metric_names(expr) == {"cascade_requests_total", "up"}
    assert selector_labels(expr) == {"cascade_requests_total": {"outcome"}}


def test_histogram_series_resolve_only_with_their_suffixes() -> None:
    families = scrape_families(EXPOSITION)
    for suffix in ("_bucket", "_sum", "_count"):
        assert resolve("cascade_overhead_seconds" + suffix, families)[0] == "cascade_overhead_seconds"
    assert resolve("cascade_overhead_seconds", families) is None


def test_counters_resolve_only_with_total_and_gauges_only_bare() -> None:
    families = scrape_families(EXPOSITION)
    assert resolve("cascade_requests_total", families)[0] == "cascade_requests"
    assert resolve("cascade_requests", families) is None
    assert resolve("cascade_requests_bucket", families) is None
    assert resolve("cascade_redis_up", families)[0] == "cascade_redis_up"
    assert resolve("cascade_redis_up_total", families) is None
    assert resolve("cascade_no_such_metric", families) is None
    assert families["cascade_requests"].labels == {"tier", "outcome"}
