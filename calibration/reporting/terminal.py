"""Rich terminal summary of a calibration: models, tiers, switching points."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

from calibration.envelope import Envelope
from calibration.routing.mechanisms import MECHANISMS
from calibration.runs import RunsMatrix
from calibration.tiers import TierSolution


def usd(value: float) -> str:
    """USD per query with 4 significant digits ($3.02e-05)."""
    return f"${value:.4g}"


def shadow_text(value: float | None) -> str:
    """Shadow price (quality per USD) or an em dash when undefined."""
    return "—" if value is None else f"{value:,.1f}"


def routes_text(solution: TierSolution) -> str:
    """'A -> B @ 0.42' or a weighted mixture on several lines."""
    lines = []
    for share in solution.routes:
        route = " -> ".join(share.models)
        if share.thresholds:
            route += " @ " + ", ".join(f"{t:.6g}" for t in share.thresholds)
        lines.append(route if len(solution.routes) == 1 else f"{share.weight:.3f} × {route}")
    return "\n".join(lines)


def models_table(matrix: RunsMatrix, envelope: Envelope) -> Table:
    """Each model's mean cost, quality and whether it is in the non-dominated pool."""
    table = Table(title=f"Models ({matrix.n_queries:,} calibration queries)", title_justify="left")
    table.add_column("model")
    table.add_column("cost / query", justify="right")
    table.add_column("quality", justify="right")
    table.add_column("in pool")
    pool = set(envelope.pool)
    singles = zip(envelope.model_names, envelope.model_cost, envelope.model_quality, strict=True)
    for name, cost, quality in singles:
        table.add_row(name, usd(cost), f"{quality:.4f}", "yes" if name in pool else "[dim]dominated[/dim]")
    return table


def tiers_table(tiers: Mapping[str, TierSolution], default_tier: str) -> Table:
    """Each tier's objective, route(s), expected cost / quality / escalation and shadow price."""
    table = Table(title="Tiers (expected values on the calibration queries)", title_justify="left")
    table.add_column("tier", no_wrap=True)
    table.add_column("objective", no_wrap=True)
    table.add_column("cost", justify="right", no_wrap=True)
    table.add_column("quality", justify="right", no_wrap=True)
    table.add_column("escal.", justify="right", no_wrap=True)
    table.add_column("shadow price\n(quality/USD)", justify="right", no_wrap=True)
    for name, solution in tiers.items():
        label = f"{name}*" if name == default_tier else name
        if solution.warning:
            label += " [yellow]![/yellow]"
        table.add_row(
            label,
            _objective_text(solution),
            usd(solution.cost),
            f"{solution.quality:.4f}",
            f"{solution.escalation_rate:.1%}",
            shadow_text(solution.shadow_price),
        )
    marked = any(solution.warning for solution in tiers.values())
    table.caption = "* default tier" + ("; ! objective not met (see warning)" if marked else "")
    return table


def _objective_text(solution: TierSolution) -> str:
    objective = solution.objective
    if objective.max_cost_usd is not None:
        return f"cost <= {usd(objective.max_cost_usd)}"
    return f"quality >= {objective.min_quality:g}"


def switching_table(envelope: Envelope) -> Table:
    """Where the envelope's best model set changes, with cost and quality at the change."""
    table = Table(title="Switching points (best model set changes)", title_justify="left")
    table.add_column("cost / query", justify="right")
    table.add_column("quality", justify="right")
    table.add_column("from")
    table.add_column("to")
    for index in envelope.switching_points:
        table.add_row(
            usd(envelope.cost[index]),
            f"{envelope.quality[index]:.4f}",
            " -> ".join(envelope.models[index - 1]),
            " -> ".join(envelope.models[index]),
        )
    return table


def print_summary(
    console: Console,
    matrix: RunsMatrix,
    envelope: Envelope,
    tiers: Mapping[str, TierSolution],
    default_tier: str,
) -> None:
    """Print models, envelope size, switching points and tiers."""
    console.print(models_table(matrix, envelope))
    console.print(
        f"Envelope: {len(envelope):,} points from {len(envelope.model_names)} single models and "
        f"{len(envelope.pairs)} pairs of the {len(envelope.pool)}-model pool; "
        f"{len(envelope.hull)} concave-hull vertices; "
        f"from {usd(envelope.cost[0])} (quality {envelope.quality[0]:.4f}) "
        f"to {usd(envelope.cost[-1])} (quality {envelope.quality[-1]:.4f})."
    )
    console.print(switching_table(envelope))
    console.print(tiers_table(tiers, default_tier))
    console.print("Tier routes (escalate iff score < threshold):")
    for name, solution in tiers.items():
        console.print(f"  {name}: " + routes_text(solution).replace("\n", " + "), highlight=False)


def heldout_table(heldout: Mapping[str, Mapping[str, Any]], default_tier: str) -> Table:
    """Each tier's cross-fitted expectations: mean [2.5th, 97.5th percentile] over the splits."""
    first = next(iter(heldout.values()))
    table = Table(
        title=(
            f"Tiers held out ({first['splits']} splits: route chosen on {1 - first['test_fraction']:.0%} "
            f"of the queries, measured on the other {first['test_fraction']:.0%}; mean [2.5%, 97.5%])"
        ),
        title_justify="left",
    )
    table.add_column("tier", no_wrap=True)
    table.add_column("cost", justify="right", no_wrap=True)
    table.add_column("quality", justify="right", no_wrap=True)
    table.add_column("escal.", justify="right", no_wrap=True)
    for name, document in heldout.items():
        cost, quality, escalation = document["cost_usd"], document["quality"], document["escalation_rate"]
        table.add_row(
            f"{name}*" if name == default_tier else name,
            f"{usd(cost['mean'])}\n[{usd(cost['low'])}, {usd(cost['high'])}]",
            f"{quality['mean']:.4f}\n[{quality['low']:.4f}, {quality['high']:.4f}]",
            f"{escalation['mean']:.1%}\n[{escalation['low']:.1%}, {escalation['high']:.1%}]",
        )
    return table


def mechanisms_table(choices: Mapping[str, Any], default_tier: str) -> Table:
    """Per tier, each mechanism's held-out mean cost and quality, and the one the tier serves."""
    table = Table(
        title="Mechanism per tier (held out, mean over the splits; * = served)", title_justify="left"
    )
    table.add_column("tier", no_wrap=True)
    for mechanism in MECHANISMS:
        table.add_column(mechanism, justify="right", no_wrap=True)
    table.add_column("serves", no_wrap=True)
    for name, choice in choices.items():
        cells = []
        for mechanism in MECHANISMS:
            outcome = choice.compared.get(mechanism)
            mark = "*" if mechanism == choice.mechanism else ""
            cells.append(
                "-" if outcome is None else f"{outcome['quality']:.4f}{mark}\n{usd(outcome['cost_usd'])}"
            )
        table.add_row(f"{name}*" if name == default_tier else name, *cells, choice.mechanism)
    return table


def bounds_table(bounds: Mapping[str, Mapping[str, Any]], default_tier: str) -> Table:
    """Each tier's certified one-sided bounds and whether they prove its objective."""
    first = next(iter(bounds.values()))
    table = Table(
        title=(
            f"Tier bounds at {first['confidence']:.0%} (route chosen on {first['selection_n']:,} queries, "
            f"certified on the other {first['n']:,}; all {first.get('statements', 4)} statements together)"
        ),
        title_justify="left",
    )
    for column in ("tier", "quality >=", "cost <=", "escalation in", "proves objective"):
        left = column in ("tier", "proves objective")
        table.add_column(column, justify="left" if left else "right", no_wrap=True)
    for name, document in bounds.items():
        low, high = document["escalation"]
        if document.get("target_certified"):
            verdict = "yes"
        elif document.get("more_queries"):
            verdict = f"no, +{document['more_queries']:,} queries"
        else:
            verdict = "no, mean misses"
        table.add_row(
            f"{name}*" if name == default_tier else name,
            f"{document['quality_min']:.4f}",
            usd(document["cost_max"]),
            f"[{low:.1%}, {high:.1%}]",
            verdict,
        )
    return table


def benefit_table(choices: Mapping[str, Any], default_tier: str) -> Table:
    """Per tier, the section scorer's and the benefit scorer's held-out mean quality and cost on the
    tier's pair, and which the tier serves (or why it was no candidate)."""
    table = Table(title="Scorer per tier (held out, mean over the splits; * = served)", title_justify="left")
    for column in ("tier", "pair", "section scorer", "escalation_benefit", "serves"):
        table.add_column(column, justify="right" if "scorer" in column or "benefit" in column else "left")
    for name, choice in choices.items():
        label = f"{name}*" if name == default_tier else name
        if choice.compared is None:
            table.add_row(label, "-", "-", "-", f"section scorer ({choice.note})")
            continue
        cells = [
            f"{outcome['quality']:.4f}{'*' if served else ''}\n{usd(outcome['cost_usd'])}"
            for outcome, served in (
                (choice.compared["section"], not choice.chosen),
                (choice.compared["escalation_benefit"], choice.chosen),
            )
        ]
        pair = " -> ".join(choice.pair)
        table.add_row(label, pair, *cells, "escalation_benefit" if choice.chosen else "section scorer")
    return table
