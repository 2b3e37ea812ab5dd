"""What a replay measured against what the policy expects: the JSON report of ``cascade replay``.

For a tier the expectation is the held-out one, ``tiers.<tier>.expected.heldout`` (means over the
cross-fitting splits: what a route chosen by this calibration does on queries it was not chosen
on), when the policy has it, else the in-sample ``tiers.<tier>.expected``; for a budget it is the
envelope point the gateway's own rule (``policies.decision``) picks for that budget (in sample:
envelope points carry no held-out figures). Each arm says which it used (``expected_basis``). The
expectation comes from the policy's section for the questions' request kind
(``policies.kinds.kind_policy``); for a mix of kinds it is the mix of each kind's, weighted by
its share of the questions. Each
realized value (quality, cost per request, escalation rate) comes with a confidence interval
(``replay.stats``), and every expectation outside its interval becomes a flag, as does
a gateway serving another policy than the one the expectations were read from.

Report schema (``"report": "cascade-replay"``, ``"version": 1``): docs/contracts.md#replay-report.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from policies import Policy, Route
from policies.decision import budget_index
from policies.kinds import TOP_LEVEL_KIND, kind_policy
from policies.schema import Bounds
from replay.run import Arm
from replay.stats import Estimate, mean_estimate, percentile

METRICS = ("quality", "cost_usd", "escalation_rate")
METRIC_LABELS = {"quality": "quality", "cost_usd": "cost/request", "escalation_rate": "escalation"}
_BOUND_TOLERANCE = 1e-9  # relative: a cost equal to its bound up to float noise is within it


@dataclass(frozen=True)
class Expectation:
    """What the policy expects of one arm, and where in the policy that comes from.

    ``basis`` is ``heldout`` or ``in-sample``; ``intervals`` holds each measure's held-out
    ``(low, high)`` (2.5th and 97.5th percentiles over the splits) when known.
    """

    source: str
    cost_usd: float
    quality: float
    escalation_rate: float
    route: str
    within_budget: bool = True
    basis: str = "in-sample"
    intervals: Mapping[str, tuple[float, float]] | None = None
    bounds: Bounds | None = None


def route_text(routes: Sequence[Route]) -> str:
    """``small -> large @ 0.5``, or ``0.5 x (small -> large @ 0.5) + 0.5 x (large)`` for a mixture."""
    parts = []
    for route in routes:
        text = " -> ".join(route.models)
        if route.thresholds:
            text += " @ " + ", ".join(f"{t:.6g}" for t in route.thresholds)
        parts.append(text if len(routes) == 1 else f"{route.weight:g} x ({text})")
    return " + ".join(parts)


def expectation_for(policy: Policy, arm: Arm, kinds: Mapping[str, int] | None = None) -> Expectation | None:
    """The policy's expectation for ``arm`` on questions of these ``kinds`` (kind -> number of
    questions; default: text only); None for a tier the policy does not define."""
    counts = {kind: n for kind, n in (kinds or {TOP_LEVEL_KIND: 1}).items() if n > 0} or {TOP_LEVEL_KIND: 1}
    parts = []
    for kind, n in counts.items():
        served = kind_policy(policy, kind)
        expectation = _served_expectation(served, arm)
        if expectation is None:
            return None
        if served is not policy:
            expectation = replace(expectation, source=f"kinds.{kind}.{expectation.source}")
        parts.append((n, expectation))
    if len(parts) == 1:
        return parts[0][1]
    total = sum(n for n, _ in parts)
    basis = {e.basis for _, e in parts}
    return Expectation(
        " + ".join(f"{n / total:.0%} x {e.source}" for n, e in parts),
        sum(n * e.cost_usd for n, e in parts) / total,
        sum(n * e.quality for n, e in parts) / total,
        sum(n * e.escalation_rate for n, e in parts) / total,
        "; ".join(f"{kind}: {e.route}" for kind, (_, e) in zip(counts, parts, strict=True)),
        all(e.within_budget for _, e in parts),
        basis.pop() if len(basis) == 1 else "mixed",
    )


def _served_expectation(policy: Policy, arm: Arm) -> Expectation | None:
    """The expectation of ``arm`` in one route table (a policy as it serves one kind)."""
    if arm.tier is not None:
        tier = policy.tiers.get(arm.tier)
        if tier is None:
            return None
        e, routes = tier.expected, route_text(tier.routes)
        h = e.heldout
        if h is None:
            return Expectation(
                f"tiers.{arm.tier}.expected",
                e.cost_usd,
                e.quality,
                e.escalation_rate,
                routes,
                bounds=e.bounds,
            )
        intervals = {name: (getattr(h, name).low, getattr(h, name).high) for name in METRICS}
        return Expectation(
            f"tiers.{arm.tier}.expected.heldout",
            h.cost_usd.mean,
            h.quality.mean,
            h.escalation_rate.mean,
            routes,
            basis="heldout",
            intervals=intervals,
            bounds=e.bounds,
        )
    assert arm.max_cost_usd is not None
    if not policy.envelope:  # the gateway then serves the default tier
        fallback = _served_expectation(policy, Arm(tier=policy.default_tier))
        assert fallback is not None
        return replace(fallback, source=f"{fallback.source} (no envelope)")
    index = budget_index(policy)
    # The same lookup as BudgetIndex.lookup, keeping the point's index to report its figures.
    within = arm.max_cost_usd >= index.costs[0]
    chosen = index.best_upto[bisect.bisect_right(index.costs, arm.max_cost_usd) - 1] if within else 0
    point = policy.envelope[chosen]
    return Expectation(
        f"envelope[{chosen}]",
        point.cost_usd,
        point.quality,
        point.escalation_rate,
        route_text([point.as_route()]),
        within,
    )


def summarize_arm(
    arm: Arm,
    rows: Sequence[dict[str, Any]],
    questions: int,
    expectation: Expectation | None,
    confidence: float,
) -> dict[str, Any]:
    """One arm's entry of the report (see ``build_report``)."""
    expected: dict[str, float | None] = dict.fromkeys(METRICS)
    if expectation is not None:
        expected = {
            "quality": expectation.quality,
            "cost_usd": expectation.cost_usd,
            "escalation_rate": expectation.escalation_rate,
        }
    estimates: dict[str, Estimate] = {
        "quality": mean_estimate([float(r["correct"]) for r in rows], confidence, expected["quality"]),
        "cost_usd": mean_estimate([float(r["cost_usd"]) for r in rows], confidence, expected["cost_usd"]),
        "escalation_rate": mean_estimate(
            [1.0 if r["escalated"] else 0.0 for r in rows], confidence, expected["escalation_rate"]
        ),
    }
    metrics, outside = _checked_metrics(estimates, expectation)
    bounds = expectation.bounds if expectation is not None else None
    latencies = [float(r["latency_ms"]) for r in rows]
    # Streamed rows (``cascade replay --stream``): when the first content token arrived.
    first_tokens = [float(r["ttft_ms"]) for r in rows if r.get("ttft_ms") is not None]
    return {
        "arm": arm.key,
        "kind": arm.kind,
        "tier": arm.tier,
        "max_cost_usd": arm.max_cost_usd,
        "requests": len(rows),
        "missing": questions - len(rows),
        "expected_from": expectation.source if expectation else None,
        "expected_route": expectation.route if expectation else None,
        "expected_within_budget": expectation.within_budget if expectation else None,
        "expected_basis": expectation.basis if expectation else None,
        "bounds": _bounds_summary(bounds),
        **metrics,
        "outside": outside,
        "ok": not outside and len(rows) == questions,
        "latency_ms": _timing(latencies),
        "ttft_ms": _timing(first_tokens) if first_tokens else None,
        "commit": dict(Counter(str(r["commit"]) for r in rows if r.get("commit"))),
        "served_tiers": dict(Counter(str(r.get("tier")) for r in rows)),
        "answered_by": dict(Counter(str(r.get("model")) for r in rows)),
        "degraded": sum(bool(r.get("degraded")) for r in rows),
        "over_budget": sum(bool(r.get("over_budget")) for r in rows),
        "invalid_answers": sum(r.get("valid") is False for r in rows),
    }


def _checked_metrics(
    estimates: Mapping[str, Estimate], expectation: Expectation | None
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Each metric's report entry and the names of those flagged: against the bounds when the
    policy has them (a realized interval wholly beyond one), else the expectation outside the
    realized interval."""
    metrics = {name: estimate.as_dict() for name, estimate in estimates.items()}
    for name, metric in metrics.items():
        interval = expectation.intervals.get(name) if expectation and expectation.intervals else None
        metric["expected_low"], metric["expected_high"] = interval or (None, None)
    bounds = expectation.bounds if expectation is not None else None
    if bounds is None:
        return metrics, [name for name, estimate in estimates.items() if estimate.outside]
    for name, metric in metrics.items():
        metric.update(bound_check(name, bounds, estimates[name]))
        metric["outside"] = metric["beyond_bound"]
    return metrics, [name for name, metric in metrics.items() if metric["beyond_bound"]]


def bound_check(name: str, bounds: Bounds, estimate: Estimate) -> dict[str, Any]:
    """One metric against the tier's one-sided bounds (``expected.bounds``): the bound's ends
    (``bound_low``/``bound_high``, None on an open side), whether the realized value lies within
    them, and whether the realized interval lies wholly beyond them (a breach the run proves)."""
    ends: dict[str, tuple[float | None, float | None]] = {
        "quality": (bounds.quality_min, None),
        "cost_usd": (None, bounds.cost_max),
        "escalation_rate": (bounds.escalation[0], bounds.escalation[1]),
    }
    low, high = ends[name]
    tolerance = _BOUND_TOLERANCE * max(abs(low or 0.0), abs(high or 0.0), 1e-12)
    check: dict[str, Any] = {
        "bound_low": low,
        "bound_high": high,
        "within_bound": None,
        "beyond_bound": False,
    }
    if estimate.realized is None or estimate.low is None or estimate.high is None:
        return check
    check["within_bound"] = (low is None or estimate.realized >= low - tolerance) and (
        high is None or estimate.realized <= high + tolerance
    )
    check["beyond_bound"] = (low is not None and estimate.high < low - tolerance) or (
        high is not None and estimate.low > high + tolerance
    )
    return check


def _bounds_summary(bounds: Bounds | None) -> dict[str, Any] | None:
    if bounds is None:
        return None
    return {"confidence": bounds.confidence, "method": bounds.method, "n": bounds.n}


def _timing(values: Sequence[float]) -> dict[str, float | None]:
    """Median, 95th percentile and mean of durations in milliseconds (None when there are none)."""
    return {
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "mean": sum(values) / len(values) if values else None,
    }


def _flags(arms: Iterable[dict[str, Any]], confidence: float) -> list[str]:
    flags = []
    for arm in arms:
        if arm["missing"]:
            flags.append(f"{arm['arm']}: {arm['missing']} questions have no result (failed requests)")
        for name in arm["outside"]:
            metric = arm[name]
            if arm.get("bounds") is not None:
                flags.append(_bound_flag(arm, name, confidence))
                continue
            flags.append(
                f"{arm['arm']}: expected {METRIC_LABELS[name]} {metric['expected']:.4g} is outside the "
                f"realized {confidence:.0%} interval [{metric['low']:.4g}, {metric['high']:.4g}] "
                f"(realized {metric['realized']:.4g}, n={arm['requests']})"
            )
    return flags


def _bound_flag(arm: dict[str, Any], name: str, confidence: float) -> str:
    metric, promised = arm[name], arm["bounds"]["confidence"]
    low, high = metric["bound_low"], metric["bound_high"]
    if low is not None and metric["high"] < low:
        side = f"below the promised minimum {low:.4g}"
    else:
        side = f"above the promised maximum {high:.4g}"
    return (
        f"{arm['arm']}: realized {METRIC_LABELS[name]} {metric['realized']:.4g} (its {confidence:.0%} "
        f"interval [{metric['low']:.4g}, {metric['high']:.4g}], n={arm['requests']}) lies wholly {side} "
        f"(bound at {promised:.0%}, expected.bounds)"
    )


def _rows_by_arm(
    rows: Iterable[dict[str, Any]], arms: Sequence[Arm], wanted: set[str]
) -> dict[str, list[dict[str, Any]]]:
    """The rows of each arm, restricted to the questions of this prompt set."""
    by_arm: dict[str, list[dict[str, Any]]] = {arm.key: [] for arm in arms}
    for row in rows:
        if row.get("arm") in by_arm and row.get("query_id") in wanted:
            by_arm[row["arm"]].append(row)
    return by_arm


def _policy_flags(
    policy: Policy | None,
    policy_file: str | None,
    arms: Sequence[Arm],
    served: list[str],
    matches: bool | None,
) -> list[str]:
    """Flags about the policy itself: another one was served, or it lacks a replayed tier."""
    flags = []
    if matches is False:
        flags.append(
            f"the gateway served policy {', '.join(served)} but the expectations are those of policy "
            f"{policy.policy_id if policy else '?'} ({policy_file}): they do not describe what was served"
        )
    if policy is not None:
        for arm in arms:
            if arm.tier is not None and arm.tier not in policy.tiers:
                flags.append(f"{arm.key}: the policy file has no tier {arm.tier!r}, so no expectation")
    return flags


def _summary(
    arm: Arm,
    rows: list[dict[str, Any]],
    questions: int,
    policy: Policy | None,
    kinds: Counter[str],
    confidence: float,
) -> dict[str, Any]:
    """``summarize_arm`` of one arm against its expectation from the policy (None without one)."""
    expected = expectation_for(policy, arm, kinds) if policy is not None else None
    return summarize_arm(arm, rows, questions, expected, confidence)


def build_report(
    *,
    gateway: str,
    prompts_file: str,
    questions: Sequence[str],
    arms: Sequence[Arm],
    rows: Iterable[dict[str, Any]],
    policy: Policy | None,
    policy_file: str | None,
    confidence: float,
    request: dict[str, Any],
    results_file: str,
    command: str | None = None,
    question_kinds: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The JSON report of a replay.

    ``question_kinds`` maps a question to its request kind (default: text), which picks the
    policy section its expectation comes from.

    Top level: ``report``/``version``, ``created_at``, ``command``, ``gateway``, ``prompts``
    (file, questions), ``results_file``, ``confidence``, ``request`` (temperature, max_tokens),
    ``policy`` (file, policy_id, served_policy_ids, matches), ``arms`` (one per tier/budget, see
    ``summarize_arm``: requests, missing, expected_from, expected_route, expected_basis,
    quality/cost_usd/escalation_rate as {realized, low, high, method, expected, expected_low,
    expected_high, outside}, outside, ok, latency_ms {p50, p95, mean}, ttft_ms (streamed runs:
    time to the first content token, {p50, p95, mean}; else None), commit (rows decided by each
    commit rule), served_tiers, answered_by, degraded, over_budget, invalid_answers), ``flags`` (one
    sentence each) and ``ok`` (no flag).
    """
    wanted = set(questions)
    kinds = Counter((question_kinds or {}).get(q, TOP_LEVEL_KIND) for q in wanted)
    by_arm = _rows_by_arm(rows, arms, wanted)
    summaries = [_summary(arm, by_arm[arm.key], len(wanted), policy, kinds, confidence) for arm in arms]
    served = sorted({str(r.get("policy_id")) for arm_rows in by_arm.values() for r in arm_rows})
    matches = None if policy is None or not served else served == [policy.policy_id]
    flags = _policy_flags(policy, policy_file, arms, served, matches) + _flags(summaries, confidence)
    return {
        "report": "cascade-replay",
        "version": 1,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command,
        "gateway": gateway,
        "prompts": {"file": prompts_file, "questions": len(wanted)},
        "results_file": results_file,
        "confidence": confidence,
        "request": request,
        "policy": {
            "file": policy_file,
            "policy_id": policy.policy_id if policy else None,
            "served_policy_ids": served,
            "matches": matches,
        },
        "arms": summaries,
        "flags": flags,
        "ok": not flags,
    }
