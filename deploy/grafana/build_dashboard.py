"""Generate the provisioned Grafana dashboard deploy/grafana/dashboards/cascade-gateway.json.

The dashboard is code so that its PromQL stays reviewable and testable (tests/deploy/ checks that
every metric it queries exists in a real gateway scrape, and that the JSON is up to date):

    .venv/bin/python deploy/grafana/build_dashboard.py            # rewrite the JSON
    .venv/bin/python deploy/grafana/build_dashboard.py --check    # exit 1 if the JSON is stale
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from learning_panels import learning_panels
from panel_kit import (
    DATASOURCE,
    RI,
    SEL,
    TIER_SEL,
    UP_MAPPING,
    quantiles,
    row,
    stat,
    target,
    timeseries,
    with_threshold_line,
)

OUTPUT = Path(__file__).resolve().parent / "dashboards" / "cascade-gateway.json"
SERVED = 'outcome=~"accepted|escalated|direct"'
# Observed escalation rate per tier: escalated over served (the population of the policy's expectation).
# A tier without any escalation has rate 0, not "no data" (the `or` branch).
_SERVED_RATE = f"sum by (tier) (rate(cascade_requests_total{{{TIER_SEL}, {SERVED}}}[{RI}]))"
OBSERVED_ESCALATION = (
    f'(sum by (tier) (rate(cascade_requests_total{{{TIER_SEL}, outcome="escalated"}}[{RI}]))'
    f" or 0 * {_SERVED_RATE}) / {_SERVED_RATE}"
)
EXPECTED_ESCALATION = f"max by (tier) (cascade_expected_escalation_rate{{{TIER_SEL}}})"


def panels() -> list[dict[str, Any]]:
    """The dashboard's panels, in reading order (layout is assigned by ``_layout``)."""
    return [
        row("Overview"),
        stat(
            "Serving policy",
            "policy_id served by each replica (cascade_policy_info). After "
            "`cascade policy push` every replica should show the new id within seconds.",
            f"max by (instance, policy_id) (cascade_policy_info{{{SEL}}})",
            "{{instance}}: {{policy_id}}",
            "none",
            text_mode="name",
        ),
        stat(
            "Redis",
            "cascade_redis_up per replica (1 = the last Redis check answered).",
            f"cascade_redis_up{{{SEL}}}",
            "{{instance}}",
            "none",
            mappings=UP_MAPPING,
            thresholds=[{"color": "red", "value": None}, {"color": "green", "value": 1}],
        ),
        stat(
            "Policy reload failures (1h)",
            "Policy loads rejected as corrupt or invalid; the replica keeps its last good policy.",
            f"sum(increase(cascade_policy_reload_failures_total{{{SEL}}}[1h]))",
            "failures",
            "none",
            thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}],
        ),
        stat(
            "Budget rejections (1h)",
            "Requests refused with 429 because a client key reached its spend limit.",
            f"sum(increase(cascade_budget_rejections_total{{{SEL}}}[1h]))",
            "rejections",
            "none",
            thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}],
        ),
        stat(
            "Spend rate",
            "Upstream spend of the whole fleet, USD per hour (last hour).",
            f"sum(rate(cascade_cost_usd_total{{{SEL}}}[1h])) * 3600",
            "USD/h",
            "currencyUSD",
        ),
        row("Traffic and escalation"),
        timeseries(
            "Request rate by tier and outcome",
            "cascade_requests_total: accepted (cheap answer "
            "kept), escalated, direct (single-model route), passthrough (a configured model by "
            "name), error.",
            [
                (
                    f"sum by (tier, outcome) (rate(cascade_requests_total{{{TIER_SEL}}}[{RI}]))",
                    "{{tier}} {{outcome}}",
                )
            ],
            "reqps",
            stack=True,
        ),
        timeseries(
            "Escalation rate: observed vs expected",
            "Observed share of served requests that "
            "escalated, per tier, against the policy's calibrated expectation "
            "(cascade_expected_escalation_rate, dashed). A lasting gap is drift: see the "
            "CascadeEscalationRateDrift alert.",
            [(OBSERVED_ESCALATION, "{{tier}} observed"), (EXPECTED_ESCALATION, "{{tier}} expected")],
            "percentunit",
            max_value=1,
        ),
        timeseries(
            "Escalation drift (observed - expected)",
            "Positive: more escalations (higher "
            "cost) than calibrated; negative: fewer (lower quality) than calibrated.",
            [(f"({OBSERVED_ESCALATION}) - on (tier) {EXPECTED_ESCALATION}", "{{tier}}")],
            "percentunit",
        ),
        with_threshold_line(
            timeseries(
                "Score drift (PSI) by tier and model",
                "Population Stability Index of each scored "
                "model's live confidence scores in a tier (the gateway's sliding window) against the "
                "calibration's distribution recorded in the policy (cascade_score_drift_psi; highest "
                "replica). Under 0.1 stable, over 0.25 (red line) a significant shift: see the "
                "CascadeScoreDrift alert. Gaps: fewer scores than drift.min_samples in the window.",
                [(f"max by (tier, model) (cascade_score_drift_psi{{{TIER_SEL}}})", "{{tier}} / {{model}}")],
                "none",
            ),
            0.25,
        ),
        timeseries(
            "Escalations by model pair",
            "cascade_escalations_total per tier and (from_model -> to_model).",
            [
                (
                    "sum by (tier, from_model, to_model) "
                    f"(rate(cascade_escalations_total{{{TIER_SEL}}}[{RI}]))",
                    "{{tier}}: {{from_model}} -> {{to_model}}",
                )
            ],
            "reqps",
        ),
        timeseries(
            "Escalations by reason",
            "cascade_escalation_reasons_total per tier and reason: low_score, a missing score "
            "(no_logprobs, tool_call_only, empty_answer, scorer_failed), an invalid answer "
            "(invalid_tool_call, invalid_structured_output) or upstream_error (docs/tool-calls.md).",
            [
                (
                    f"sum by (tier, reason) (rate(cascade_escalation_reasons_total{{{TIER_SEL}}}[{RI}]))",
                    "{{tier}}: {{reason}}",
                )
            ],
            "reqps",
        ),
        timeseries(
            "Invalid answers by check",
            "cascade_invalid_answers_total per tier, model and failed check (final stages "
            "included: their answers are returned as they are).",
            [
                (
                    f"sum by (tier, model, check) (rate(cascade_invalid_answers_total{{{TIER_SEL}}}[{RI}]))",
                    "{{tier}} / {{model}}: {{check}}",
                )
            ],
            "reqps",
        ),
        timeseries(
            "Score drift window samples",
            "Live confidence scores in each replica's drift "
            "window per tier and model (cascade_score_drift_samples, all replicas); PSI is "
            "reported from drift.min_samples on.",
            [(f"sum by (tier, model) (cascade_score_drift_samples{{{TIER_SEL}}})", "{{tier}} / {{model}}")],
            "short",
        ),
        row("Cost"),
        timeseries(
            "Cost per request by tier",
            "Upstream spend per served request (all calls of a "
            "request: the cheap call plus the escalation), USD.",
            [
                (
                    f"sum by (tier) (rate(cascade_cost_usd_total{{{TIER_SEL}}}[{RI}]))"
                    " / sum by (tier) "
                    f'(rate(cascade_requests_total{{{TIER_SEL}, outcome!="error"}}[{RI}]))',
                    "{{tier}}",
                )
            ],
            "currencyUSD",
        ),
        timeseries(
            "Spend rate by tier and model",
            "USD per hour, stacked.",
            [
                (
                    f"sum by (tier, model) (rate(cascade_cost_usd_total{{{TIER_SEL}}}[{RI}])) * 3600",
                    "{{tier}} / {{model}}",
                )
            ],
            "currencyUSD",
            stack=True,
        ),
        timeseries(
            "Tokens by model",
            "cascade_tokens_total per model and kind (prompt | completion).",
            [(f"sum by (model, kind) (rate(cascade_tokens_total{{{SEL}}}[{RI}]))", "{{model}} {{kind}}")],
            "short",
            stack=True,
        ),
        row("Confidence"),
        {
            "type": "heatmap",
            "title": "Confidence score distribution",
            "description": "cascade_confidence_score buckets over time (all tiers and models selected). "
            "Mass moving across the tier thresholds changes the escalation rate.",
            "datasource": DATASOURCE,
            "targets": [
                target(
                    f"sum by (le) (increase(cascade_confidence_score_bucket{{{TIER_SEL}}}[{RI}]))",
                    "{{le}}",
                    "A",
                    format="heatmap",
                )
            ],
            "fieldConfig": {"defaults": {}, "overrides": []},
            "options": {
                "calculate": False,
                "yAxis": {"axisPlacement": "left"},
                "cellGap": 1,
                "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64},
                "rowsFrame": {"layout": "auto"},
                "tooltip": {"show": True, "yHistogram": True},
            },
        },
        timeseries(
            "Confidence score quantiles by tier and model",
            "p10 / p50 / p90 of the scores the gateway computed.",
            [
                (
                    f"histogram_quantile({q}, sum by (tier, model, le) "
                    f"(rate(cascade_confidence_score_bucket{{{TIER_SEL}}}[{RI}])))",
                    f"{{{{tier}}}} {{{{model}}}} p{round(q * 100)}",
                )
                for q in (0.1, 0.5, 0.9)
            ],
            "none",
        ),
        row("Latency and upstreams"),
        timeseries(
            "Time to first token by tier and outcome",
            "Streamed requests: from the request to the first bytes of the answer "
            "(cascade_time_to_first_token_seconds). A buffer tier's accepted stream waits for the "
            "cheap model's whole answer; a prefix tier's only for its first tokens.",
            [
                (
                    f"histogram_quantile({q}, sum by (tier, outcome, le) "
                    f"(rate(cascade_time_to_first_token_seconds_bucket{{{TIER_SEL}}}[{RI}])))",
                    f"{{{{tier}}}} {{{{outcome}}}} p{round(q * 100)}",
                )
                for q in (0.5, 0.95)
            ],
            "s",
        ),
        timeseries(
            "Prefix commit: tokens held and cancelled",
            "Tiers with the prefix commit rule: the median content tokens of the cheap stage held when "
            "it was decided (cascade_commit_position_tokens) and the cheap tokens cancelled on "
            "escalation per second (cascade_cancelled_tokens_total).",
            [
                (
                    "histogram_quantile(0.5, sum by (tier, le) "
                    f"(rate(cascade_commit_position_tokens_bucket{{{TIER_SEL}}}[{RI}])))",
                    "{{tier}} held p50",
                ),
                (
                    f"sum by (tier, model) (rate(cascade_cancelled_tokens_total{{{TIER_SEL}}}[{RI}]))",
                    "{{tier}} {{model}} cancelled/s",
                ),
            ],
            "short",
        ),
        timeseries(
            "Gateway overhead quantiles",
            "Time the gateway itself spends per request, upstream calls excluded (cascade_overhead_seconds).",
            quantiles("cascade_overhead_seconds", "", SEL, ""),
            "s",
        ),
        timeseries(
            "Request duration by tier",
            "Whole request, client's view (cascade_request_duration_seconds).",
            quantiles("cascade_request_duration_seconds", "tier", TIER_SEL, "{{tier}} "),
            "s",
        ),
        timeseries(
            "Upstream latency by model",
            "One upstream call attempt (cascade_upstream_duration_seconds).",
            quantiles("cascade_upstream_duration_seconds", "model", SEL, "{{model}} "),
            "s",
        ),
        timeseries(
            "Upstream error rate by model",
            "Share of upstream call attempts that did not "
            "return 2xx (4xx, 429, 5xx, timeout, connection error, malformed body).",
            [
                (
                    f'sum by (model) (rate(cascade_upstream_requests_total{{{SEL}, status!~"2.."}}[{RI}]))'
                    f" / sum by (model) (rate(cascade_upstream_requests_total{{{SEL}}}[{RI}]))",
                    "{{model}}",
                )
            ],
            "percentunit",
            max_value=1,
        ),
        timeseries(
            "Upstream calls by model and status",
            "cascade_upstream_requests_total.",
            [
                (
                    f"sum by (model, status) (rate(cascade_upstream_requests_total{{{SEL}}}[{RI}]))",
                    "{{model}} {{status}}",
                )
            ],
            "reqps",
            stack=True,
        ),
        timeseries(
            "Circuit breaker state by model",
            "cascade_upstream_circuit_state: 0 closed, 1 open (the model is skipped: a cascade escalates "
            "with reason circuit_open, a last stage answers 503), 2 half-open (one probe let through). "
            "The highest of the replicas.",
            [(f"max by (model) (cascade_upstream_circuit_state{{{SEL}}})", "{{model}}")],
            "short",
            max_value=2,
        ),
        *learning_panels(),
    ]


def _layout(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Assign ids and grid positions: rows span the width, stats 5 wide, graphs 12 wide."""
    y, x, row_height = 0, 0, 0
    placed = []
    for panel_id, panel in enumerate(items, start=1):
        if panel["type"] == "row":
            if x:
                y, x = y + row_height, 0
            panel["gridPos"] = {"h": 1, "w": 24, "x": 0, "y": y}
            y, row_height = y + 1, 0
        else:
            is_stat = panel["type"] == "stat"
            width, height = (24 // 5, 4) if is_stat else (12, 8)
            if x + width > 24:
                y, x = y + row_height, 0
            panel["gridPos"] = {"h": height, "w": width, "x": x, "y": y}
            x, row_height = x + width, max(row_height, height)
        panel["id"] = panel_id
        placed.append(panel)
    return placed


def _query_variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"var-{name}"},
        "definition": query,
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


def dashboard() -> dict[str, Any]:
    """The whole dashboard document (Grafana 10/11 schema)."""
    return {
        "uid": "cascade-gateway",
        "title": "Cascade gateway",
        "description": "LLM cascade gateway: traffic, escalation vs policy, cost, confidence, latency, "
        "learning.",
        "tags": ["cascade", "llm", "gateway"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {"text": "Prometheus", "value": "prometheus"},
                    "hide": 0,
                },
                _query_variable("job", "Job", "label_values(cascade_requests_total, job)"),
                _query_variable(
                    "instance", "Replica", 'label_values(cascade_requests_total{job=~"$job"}, instance)'
                ),
                _query_variable("tier", "Tier", 'label_values(cascade_requests_total{job=~"$job"}, tier)'),
            ]
        },
        "annotations": {
            "list": [
                {
                    "name": "Policy changes",
                    "enable": True,
                    "iconColor": "purple",
                    "datasource": DATASOURCE,
                    # A policy_id that is served now but was not a minute ago: a push or reload took effect.
                    "expr": f"max by (policy_id) (cascade_policy_info{{{SEL}}})"
                    f" unless max by (policy_id) (cascade_policy_info{{{SEL}}} offset 1m)",
                    "titleFormat": "policy {{policy_id}}",
                    "step": "30s",
                }
            ]
        },
        "panels": _layout(panels()),
    }


def render() -> str:
    """The dashboard as the exact text of the committed JSON file."""
    return json.dumps(dashboard(), indent=2, sort_keys=False) + "\n"


def main(argv: list[str]) -> int:
    """Write the JSON, or with ``--check`` report whether the committed file is up to date."""
    text = render()
    if "--check" in argv:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(f"{OUTPUT} is stale: run python {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
