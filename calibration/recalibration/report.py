"""What ``cascade recalibrate`` shows and writes: the comparison table and the JSON report."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.table import Table

from calibration.recalibration.kind_results import KindRecalibration
from calibration.recalibration.recalibrate import Recalibration
from calibration.recalibration.rule import Estimate, TierMetrics
from policies.kinds import kind_policy
from policies.schema import Policy, Tier
from redaction import redact_url

REPORT_NAME = "cascade-recalibrate"
REPORT_VERSION = 1


def _route_text(tier: Tier | None) -> str:
    if tier is None:
        return "—"
    lines = []
    for route in tier.routes:
        text = " -> ".join(route.models)
        if route.thresholds:
            text += " @ " + ", ".join(f"{t:.4g}" for t in route.thresholds)
        lines.append(text if len(tier.routes) == 1 else f"{route.weight:.2f} × {text}")
    routing = tier.routing
    if routing is None:
        return "\n".join(lines)
    # A routed tier is served by its router; its routes are the fallback (docs/routing.md).
    if routing.mechanism == "routed":
        head = f"router, price weight {routing.price_weight:.4g}"
    elif routing.models is not None and len(routing.models) == 2:
        cheap, strong = routing.models
        head = (
            f"hybrid: {cheap} -> {strong} @ {routing.threshold:.4g}, "
            f"straight to {strong} if p < {routing.direct_below:.3g}"
        )
    else:
        head = f"hybrid: {', '.join(routing.models or [])}"
    return "\n".join([head, "fallback: " + " + ".join(lines)])


def mechanism(tier: Tier) -> str:
    """How a tier is served: ``cascade``, ``routed`` or ``hybrid``."""
    return "cascade" if tier.routing is None else tier.routing.mechanism


def _quality(e: Estimate, signed: bool = False) -> str:
    sign = "+" if signed else ""
    return f"{e.mean:{sign}.4f}\n[{e.low:{sign}.4f}, {e.high:{sign}.4f}]"


def _usd(value: float, signed: bool) -> str:
    sign = ("-" if value < 0 else "+") if signed else ("-" if value < 0 else "")
    return f"{sign}${abs(value):.3g}"


def _cost(e: Estimate, signed: bool = False) -> str:
    return f"{_usd(e.mean, signed)}\n[{_usd(e.low, signed)}, {_usd(e.high, signed)}]"


def _rate(e: Estimate, signed: bool = False) -> str:
    sign = "+" if signed else ""
    return f"{e.mean:{sign}.1%}\n[{e.low:{sign}.1%}, {e.high:{sign}.1%}]"


def _cells(metrics: TierMetrics, signed: bool = False) -> list[str]:
    return [
        _quality(metrics.quality, signed),
        _cost(metrics.cost_usd, signed),
        _rate(metrics.escalation_rate, signed),
    ]


def comparison_table(result: Recalibration, kind: str | None = None) -> Table:
    """Per tier of one request kind (default: the top level's): the new policy, the current one and
    their paired difference, with intervals and checks."""
    one = result.kinds[kind] if kind is not None else result.top
    comparison = one.comparison
    current = result.current.policy
    against = "none" if current is None else current.policy_id
    title = (
        f"{_kind_prefix(result, one)}New policy {result.policy.policy_id} vs current {against}: held out on "
        f"{comparison.heldout_queries:,} queries, {comparison.confidence:.0%} intervals "
        f"({comparison.resamples:,} paired bootstrap resamples)"
    )
    table = Table(title=title, title_justify="left", show_lines=True)
    table.add_column("tier")
    table.add_column("policy")
    table.add_column("quality", justify="right")
    table.add_column("cost / query", justify="right")
    table.add_column("escalation", justify="right")
    table.add_column("check")
    for name, tier in comparison.tiers.items():
        label = f"{name}\n{_objective_text(tier.objective.max_cost_usd, tier.objective.min_quality)}"
        verdict = "\n".join(
            ("[green]ok[/green] " if c.ok else "[red]FAIL[/red] ") + c.name for c in tier.checks
        )
        table.add_row(label, "new", *_cells(tier.new), verdict)
        if tier.current is None or tier.difference is None:
            table.add_row("", "current", "—", "—", "—", "")
            continue
        table.add_row("", "current", *_cells(tier.current), "")
        table.add_row("", "new − current", *_cells(tier.difference, signed=True), "")
    for name in comparison.dropped_tiers:
        table.add_row(name, "current only", "", "", "", "[red]FAIL[/red] dropped")
    return table


def routes_table(result: Recalibration, kind: str | None = None) -> Table:
    """Each tier's route(s) in the new and the current policy, as they serve one request kind."""
    one = result.kinds[kind] if kind is not None else result.top
    new = kind_policy(result.policy, one.kind)
    current = None if result.current.policy is None else kind_policy(result.current.policy, one.kind)
    table = Table(title=f"{_kind_prefix(result, one)}Routes", title_justify="left")
    table.add_column("tier")
    table.add_column("new")
    table.add_column("current")
    names = list(new.tiers) + [t for t in (current.tiers if current else {}) if t not in new.tiers]
    for name in names:
        table.add_row(
            name,
            _route_text(new.tiers.get(name)),
            _route_text(None if current is None else current.tiers.get(name)),
        )
    return table


def _kind_prefix(result: Recalibration, one: KindRecalibration) -> str:
    return f"Kind {one.kind} ({one.section}): " if len(result.kinds) > 1 else ""


def _objective_text(max_cost: float | None, min_quality: float | None) -> str:
    return f"max ${max_cost:.3g}" if max_cost is not None else f"min q {min_quality:g}"


def report_document(
    result: Recalibration,
    *,
    policy_file: Path | None,
    pushed_version: int | None,
    command: list[str] | None = None,
) -> dict[str, Any]:
    """The JSON report (docs/contracts.md, "Recalibration"): ``data``, ``tiers`` and
    ``dropped_tiers`` of the top level, the same under ``kinds.KIND`` for every section."""
    options, top = result.options, result.top
    current = result.current.policy
    comparison = top.comparison
    return {
        "report": REPORT_NAME,
        "version": REPORT_VERSION,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(command if command is not None else ["cascade", *sys.argv[1:]]),
        "store": redact_url(options.store),
        "since": options.since,
        "where": options.where,
        "data": {
            "models": list(top.models),
            "complete_queries": result.selection_queries,
            "incomplete_queries_dropped": result.incomplete_queries,
            **_kind_data(top),
            "holdout": options.holdout,
            "seed": options.seed,
        },
        "bootstrap": {"resamples": comparison.resamples, "confidence": comparison.confidence, "paired": True},
        "tolerances": {"quality": comparison.tolerances.quality, "cost": comparison.tolerances.cost},
        "new_policy": {
            "policy_id": result.policy.policy_id,
            "file": None if policy_file is None else str(policy_file),
            "scorer": result.policy.scorer.model_dump(),
            "kind": top.kind,
            "heldout_splits": options.heldout_splits,
        },
        "current_policy": None
        if current is None
        else {"policy_id": current.policy_id, "source": result.current.source},
        "tiers": _tiers(result, top),
        "dropped_tiers": comparison.dropped_tiers,
        "kinds": {
            kind: _kind_section(result, kind, one) for kind, one in result.kinds.items() if one is not top
        },
        "decision": {
            "accepted": result.accepted,
            "reason": result.refusal,
            "pushed": pushed_version is not None,
            "version": pushed_version,
            "target": None if options.push is None else redact_url(options.push),
        },
        "notes": result.notes,
    }


def _kind_section(result: Recalibration, kind: str, one: KindRecalibration) -> dict[str, Any]:
    """The report of one kind's section (``kinds.KIND``)."""
    return {
        "section": one.section,
        "scorer": kind_policy(result.policy, kind).scorer.model_dump(),
        "data": {"models": list(one.models), **_kind_data(one)},
        "tiers": _tiers(result, one),
        "dropped_tiers": one.comparison.dropped_tiers,
    }


def _kind_data(one: KindRecalibration) -> dict[str, Any]:
    return {
        "queries": one.queries,
        "calibration_queries": int(one.split.calibration.size),
        "heldout_queries": int(one.split.test.size),
        "strata": one.strata,
    }


def _tiers(result: Recalibration, one: KindRecalibration) -> dict[str, Any]:
    """Each tier of one kind: objective, new and current on the held-out queries, checks."""
    new = kind_policy(result.policy, one.kind)
    current: Policy | None = None
    if result.current.policy is not None:
        current = kind_policy(result.current.policy, one.kind)
    tiers: dict[str, Any] = {}
    for name, tier in one.comparison.tiers.items():
        new_tier = new.tiers[name]
        tiers[name] = {
            "objective": new_tier.objective.model_dump(exclude_none=True),
            "new": {
                **tier.new.as_dict(),
                "mechanism": mechanism(new_tier),
                "expected": new_tier.expected.model_dump(),
            },
            "current": None
            if tier.current is None or current is None
            else {
                **tier.current.as_dict(),
                "mechanism": mechanism(current.tiers[name]),
                "expected": current.tiers[name].expected.model_dump(),
            },
            "difference": None if tier.difference is None else tier.difference.as_dict(),
            "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in tier.checks],
            "ok": tier.ok,
        }
    return tiers


def write_report(document: dict[str, Any], path: Path) -> None:
    """Write the report atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp creates 0600; a report is read by others
        with os.fdopen(fd, "w") as handle:
            json.dump(document, handle, indent=2, allow_nan=False)
            handle.write("\n")
        os.replace(name, path)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
