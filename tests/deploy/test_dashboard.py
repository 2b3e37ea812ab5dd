"""The provisioned Grafana dashboard is up to date with its generator and shows what operators need."""

from __future__ import annotations

import json
import subprocess
import sys

from deploy_support import DASHBOARD, DEPLOY


def test_committed_dashboard_json_matches_its_generator() -> None:
    result = subprocess.run(
        [sys.executable, str(DEPLOY / "grafana" / "build_dashboard.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_dashboard_has_the_panels_operators_read() -> None:
    document = json.loads(DASHBOARD.read_text())
    panels = {p["title"]: p for p in document["panels"]}
    exprs = {title: " ".join(t["expr"] for t in p.get("targets", [])) for title, p in panels.items()}
    assert "cascade_requests_total" in exprs["Request rate by tier and outcome"]
    observed_vs_expected = exprs["Escalation rate: observed vs expected"]
    assert 'outcome="escalated"' in observed_vs_expected
    assert "cascade_expected_escalation_rate" in observed_vs_expected
    assert "cascade_cost_usd_total" in exprs["Cost per request by tier"]
    assert "by (tier, model)" in exprs["Spend rate by tier and model"]
    assert panels["Confidence score distribution"]["type"] == "heatmap"
    assert "cascade_confidence_score_bucket" in exprs["Confidence score distribution"]
    assert "histogram_quantile(0.99" in exprs["Gateway overhead quantiles"]
    assert "cascade_upstream_duration_seconds_bucket" in exprs["Upstream latency by model"]
    assert 'status!~"2.."' in exprs["Upstream error rate by model"]
    assert "cascade_upstream_circuit_state" in exprs["Circuit breaker state by model"]


def test_dashboard_has_a_learning_row_reading_what_the_learning_alerts_read() -> None:
    document = json.loads(DASHBOARD.read_text())
    titles = [p["title"] for p in document["panels"]]
    learning = titles[titles.index("Learning") :]
    panels = {p["title"]: p for p in document["panels"] if p["title"] in learning}
    exprs = {title: " ".join(t["expr"] for t in p.get("targets", [])) for title, p in panels.items()}
    assert panels["Traffic store"]["type"] == "stat"
    assert "cascade_learning_store_up" in exprs["Traffic store"]
    assert "by (reason)" in exprs["Samples drawn and dropped"]
    assert "cascade_learning_sampled_total" in exprs["Samples drawn and dropped"]
    spend = exprs["Shadow spend in the last hour vs cap"]
    assert "cascade_shadow_spend_window_usd" in spend and "cascade_shadow_spend_cap_usd" in spend
    assert "cascade_shadow_cost_usd_total" in exprs["Shadow spend rate by model"]
    assert "by (judge, outcome)" in exprs["Judge outcomes"]


def test_panels_use_the_datasource_variable_and_do_not_overlap() -> None:
    document = json.loads(DASHBOARD.read_text())
    occupied: set[tuple[int, int]] = set()
    for panel in document["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}"
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & occupied, panel["title"]
        occupied |= cells
    assert len({p["id"] for p in document["panels"]}) == len(document["panels"])
