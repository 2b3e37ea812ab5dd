"""A replay report for people: the terminal table and the self-contained HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from replay.report import METRIC_LABELS, METRICS


def _number(name: str, value: float | None) -> str:
    if value is None:
        return "—"
    if name == "cost_usd":
        return "$" + _short(value)
    if name == "escalation_rate":
        return f"{value:.1%}"
    return f"{value:.3f}"


def _short(value: float) -> str:
    """3 significant digits, exponent without padding (``3.32e-6``)."""
    return f"{value:.3g}".replace("e-0", "e-").replace("e+0", "e+")


def _interval(name: str, metric: dict[str, Any]) -> str:
    if metric["low"] is None:
        return "—"
    return f"{_number(name, metric['low'])} - {_number(name, metric['high'])}".replace("$", "")


def duration_text(ms: float | None) -> str:
    """``840 ms``, or ``7.0 s`` from 10 s up."""
    if ms is None:
        return "—"
    return f"{ms / 1000:.1f} s" if ms >= 10_000 else f"{ms:.0f} ms"


def arms_table(report: dict[str, Any]) -> Table:
    """Per tier/budget, one row per metric: realized, its interval, the expectation (! if outside)."""
    level = f"{report['confidence']:.0%}"
    table = Table(
        title=f"Realized vs expected, {report['prompts']['questions']} questions",
        title_justify="left",
        box=box.SIMPLE_HEAD,  # no vertical rules: fits 80 columns
    )
    table.add_column("tier / budget", no_wrap=True)
    table.add_column("metric", no_wrap=True)
    table.add_column("realized", justify="right", no_wrap=True)
    table.add_column(f"{level} interval", justify="right", no_wrap=True)
    promised = "promised" if any(arm.get("bounds") for arm in report["arms"]) else "expected"
    table.add_column(promised, justify="right", no_wrap=True)
    for arm in report["arms"]:
        count = f"n={arm['requests']}" + (f", {arm['missing']} missing" if arm["missing"] else "")
        labels = [arm["arm"], count, "", "", ""]
        rows = [
            (
                METRIC_LABELS[name],
                _number(name, arm[name]["realized"]),
                _interval(name, arm[name]),
                _expected(name, arm[name]),
            )
            for name in METRICS
        ]
        rows.append(("latency p50", duration_text(arm["latency_ms"]["p50"]), "", ""))
        rows.append(("latency p95", duration_text(arm["latency_ms"]["p95"]), "", ""))
        if arm.get("ttft_ms"):  # a streamed run: when the first content token arrived
            rows.append(("first token p50", duration_text(arm["ttft_ms"]["p50"]), "", ""))
            rows.append(("first token p95", duration_text(arm["ttft_ms"]["p95"]), "", ""))
            labels += [""] * 2
        for index, (label, row) in enumerate(zip(labels, rows, strict=True)):
            table.add_row(label, *row, end_section=index == len(rows) - 1)
    # The legend explains the marks, so it is printed only when some expectation carries one.
    bounded = any(arm.get("bounds") for arm in report["arms"])
    legend = []
    if any(arm[name]["outside"] for arm in report["arms"] for name in METRICS):
        legend.append(
            "! the realized interval lies beyond the bound"
            if bounded
            else "! the expectation lies outside the realized interval"
        )
    if any(arm[name].get("within_bound") is False for arm in report["arms"] for name in METRICS):
        legend.append("~ the realized value is beyond the bound, its interval is not")
    if legend:
        table.caption = "; ".join(legend)
    return table


def _expected(name: str, metric: dict[str, Any]) -> str:
    if "bound_low" in metric:  # the policy's bounds (expected.bounds) are the promise
        return _bound(name, metric)
    text = _number(name, metric["expected"])
    return f"[bold red]{text} ![/bold red]" if metric["outside"] else text


def _bound(name: str, metric: dict[str, Any]) -> str:
    """``>= 0.868``, ``<= $2.49e-5`` or ``8.5% - 18.3%``; ``!`` when the realized interval lies
    beyond it, ``~`` when only the realized value does."""
    low, high = metric["bound_low"], metric["bound_high"]
    if high is None:
        text = ">= " + _number(name, low)
    elif low is None:
        text = "<= " + _number(name, high)
    else:
        text = f"{_number(name, low)} - {_number(name, high)}"
    if metric["beyond_bound"]:
        return f"[bold red]{text} ![/bold red]"
    return f"{text} ~" if metric["within_bound"] is False else text


def policy_line(report: dict[str, Any]) -> str:
    """Which policy the expectations come from and whether the gateway served it."""
    policy = report["policy"]
    served = ", ".join(policy["served_policy_ids"]) or "nothing yet"
    if policy["policy_id"] is None:
        return f"served policy: {served}; no --policy given, so no expectations"
    if policy["matches"]:
        return f"policy {policy['policy_id']} ({policy['file']}) is the one the gateway served"
    if policy["matches"] is None:
        return f"expectations from policy {policy['policy_id']} ({policy['file']}); served: {served}"
    return (
        f"[bold red]POLICY MISMATCH[/bold red]: expectations from {policy['policy_id']} ({policy['file']}), "
        f"the gateway served {served}"
    )


def print_report(console: Console, report: dict[str, Any]) -> None:
    """The table, the policy line, routes, and every flag (or that there is none)."""
    console.print(arms_table(report))
    console.print(policy_line(report), highlight=False)
    for arm in report["arms"]:
        if arm["expected_route"]:
            console.print(
                f"  {arm['arm']}: expected from {arm['expected_from']} ({arm.get('expected_basis')}): "
                f"{arm['expected_route']}; "
                f"answered by {_counts(arm['answered_by'])}",
                highlight=False,
            )
    if report["flags"]:
        console.print(f"[bold red]{len(report['flags'])} flag(s):[/bold red]")
        for flag in report["flags"]:
            console.print(f"  ! {flag}", highlight=False, markup=False)
    else:
        console.print(
            "[green]every realized interval reaches its bound[/green]"
            if any(arm.get("bounds") for arm in report["arms"])
            else "[green]every expectation lies within its realized interval[/green]"
        )


def _counts(counter: dict[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(counter.items(), key=lambda kv: -kv[1]))


def write_html(report: dict[str, Any], path: Path) -> Path:
    """The report as one self-contained HTML page (the project's HTML report helper)."""
    from calibration.reporting.html import Preformatted, Section, Table, write_html_report

    policy = report["policy"]
    columns = ["tier / budget", "n", "missing"]
    for name in METRICS:
        columns += [METRIC_LABELS[name], "interval", "expected (bound)", "outside"]
    columns += ["p50 ms", "p95 ms", "first token p50 ms", "first token p95 ms"]
    columns += ["expected from", "route", "answered by"]
    rows = []
    for arm in report["arms"]:
        row: list[Any] = [arm["arm"], arm["requests"], arm["missing"]]
        for name in METRICS:
            metric = arm[name]
            row += [
                _number(name, metric["realized"]),
                _interval(name, metric),
                _number(name, metric["expected"])
                + (
                    f" ({_bound(name, metric).replace('[bold red]', '').replace('[/bold red]', '')})"
                    if "bound_low" in metric
                    else ""
                ),
                metric["outside"],
            ]
        row += [
            arm["latency_ms"]["p50"],
            arm["latency_ms"]["p95"],
            (arm.get("ttft_ms") or {}).get("p50"),
            (arm.get("ttft_ms") or {}).get("p95"),
            arm["expected_from"],
            arm["expected_route"],
            _counts(arm["answered_by"]),
        ]
        rows.append(row)
    sections = [
        Section(
            "Realized vs expected",
            [
                Table(columns, rows, caption=f"{report['confidence']:.0%} intervals around realized values"),
                policy_line(report).replace("[bold red]", "").replace("[/bold red]", ""),
            ],
        ),
        Section("Flags", list(report["flags"]) or ["Every expectation lies within its realized interval."]),
        Section(
            "Run",
            [
                Preformatted(report.get("command") or ""),
                f"Gateway {report['gateway']}; prompts {report['prompts']['file']} "
                f"({report['prompts']['questions']} questions); "
                f"temperature {report['request']['temperature']}, "
                f"max_tokens {report['request']['max_tokens'] or 'not sent'}; "
                f"per-request results in {report['results_file']}; policy file {policy['file']}.",
            ],
        ),
    ]
    return write_html_report(path, "Replay against a live gateway", sections, subtitle=report["gateway"])
