"""Building blocks of the dashboard's panels (deploy/grafana/build_dashboard.py): query targets,
time series, stats and rows, restricted by the dashboard's variables.
"""

from __future__ import annotations

from typing import Any

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Every query is restricted by the dashboard's variables.
SEL = 'job=~"$job", instance=~"$instance"'
TIER_SEL = f'{SEL}, tier=~"$tier"'
RI = "$__rate_interval"


def target(expr: str, legend: str, ref: str, **extra: Any) -> dict[str, Any]:
    """One PromQL query of a panel, against the dashboard's data source variable."""
    return {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": ref, **extra}


def timeseries(
    title: str,
    description: str,
    targets: list[tuple[str, str]],
    unit: str,
    *,
    stack: bool = False,
    max_value: float | None = None,
) -> dict[str, Any]:
    """A time series panel of (PromQL, legend) targets; ``stack`` stacks them, ``max_value`` fixes
    the axis to [0, max_value]."""
    defaults: dict[str, Any] = {
        "unit": unit,
        "custom": {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 10 if stack else 0,
            "stacking": {"mode": "normal" if stack else "none", "group": "A"},
            "showPoints": "never",
            "spanNulls": False,
        },
    }
    if max_value is not None:
        defaults["max"] = max_value
        defaults["min"] = 0
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": [target(expr, legend, chr(65 + i)) for i, (expr, legend) in enumerate(targets)],
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "mean"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
    }


def stat(
    title: str,
    description: str,
    expr: str,
    legend: str,
    unit: str,
    *,
    instant: bool = True,
    mappings: list[dict[str, Any]] | None = None,
    thresholds: list[dict[str, Any]] | None = None,
    text_mode: str = "value",
) -> dict[str, Any]:
    """A stat panel of one query (instant by default), coloured by ``thresholds``."""
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": [target(expr, legend, "A", instant=instant)],
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "mappings": mappings or [],
                "thresholds": {
                    "mode": "absolute",
                    "steps": thresholds or [{"color": "green", "value": None}],
                },
            },
            "overrides": [],
        },
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "textMode": text_mode,
            "colorMode": "background",
            "graphMode": "none",
        },
    }


def with_threshold_line(panel: dict[str, Any], value: float) -> dict[str, Any]:
    """Draw ``value`` as a red horizontal line on a time series panel (the alert's threshold)."""
    defaults = panel["fieldConfig"]["defaults"]
    defaults["thresholds"] = {
        "mode": "absolute",
        "steps": [{"color": "green", "value": None}, {"color": "red", "value": value}],
    }
    defaults["custom"]["thresholdsStyle"] = {"mode": "line"}
    return panel


def row(title: str) -> dict[str, Any]:
    """A row header (panels after it, up to the next row, belong to it)."""
    return {"type": "row", "title": title, "collapsed": False, "panels": []}


def quantiles(metric: str, by: str, selector: str, legend_prefix: str) -> list[tuple[str, str]]:
    """p50, p90 and p99 targets of a histogram, grouped ``by`` (may be empty)."""
    group = f"{by}, le" if by else "le"
    return [
        (
            f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{{{selector}}}[{RI}])))",
            f"{legend_prefix}p{round(q * 100)}",
        )
        for q in (0.5, 0.9, 0.99)
    ]


UP_MAPPING = [
    {
        "type": "value",
        "options": {"0": {"text": "DOWN", "color": "red"}, "1": {"text": "UP", "color": "green"}},
    }
]
