"""The ``cascade calibrate --report DIR`` output: PNG plots and one self-contained report.html."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from calibration.envelope import Envelope
from calibration.reporting.calibration_plots import write_calibration_plots
from calibration.reporting.html import Figure, Section, Table, write_html_report
from calibration.reporting.terminal import routes_text
from calibration.routing.mechanisms import MECHANISMS, MechanismChoice, MechanismCurves
from calibration.runs import RunsMatrix
from calibration.tiers import TierSolution

REPORT_PAGE = "report.html"


def calibration_sections(
    matrix: RunsMatrix,
    envelope: Envelope,
    tiers: Mapping[str, TierSolution],
    default_tier: str,
    plots: Mapping[str, Path],
    *,
    policy_id: str = "",
    filters: Mapping[str, str] | None = None,
    randomize: bool = False,
    mechanisms: Mapping[str, MechanismChoice] | None = None,
    bounds: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Section]:
    """Sections of the calibration report (summary, models, tiers, with ``bounds`` each tier's
    certified bounds, with ``mechanisms`` each tier's mechanisms held out, plots, switching, hull)."""
    return [
        _summary_section(matrix, envelope, tiers, policy_id=policy_id, filters=filters, randomize=randomize),
        _models_section(envelope),
        _tiers_section(tiers, default_tier),
        *([bounds_section(bounds, default_tier)] if bounds else []),
        *([mechanisms_section(mechanisms, default_tier)] if mechanisms else []),
        _plots_section(plots, routed=bool(mechanisms)),
        _switching_section(envelope),
        _hull_section(envelope),
    ]


def mechanisms_section(choices: Mapping[str, MechanismChoice], default_tier: str) -> Section:
    """Per tier, the held-out mean quality and cost of the cascade, the router and the hybrid side
    by side, and the mechanism the tier serves (``calibration.routing.mechanisms``)."""
    rows = []
    for tier, choice in choices.items():
        row: list[object] = [f"{tier} (default)" if tier == default_tier else tier]
        for name in MECHANISMS:
            outcome = choice.compared.get(name)
            row += ["-", "-"] if outcome is None else [outcome["quality"], outcome["cost_usd"]]
        rows.append([*row, choice.mechanism])
    headers = ["tier"]
    for name in MECHANISMS:
        headers += [f"{name} quality", f"{name} cost (USD)"]
    return Section(
        "Mechanisms per tier (held out)",
        [
            Table(
                [*headers, "serves"],
                rows,
                caption="Mean over the held-out splits of the policy's protocol (each mechanism fitted "
                "and chosen on a split's calibration part, measured on its test part); the tier serves "
                "the best quality within its budget (docs/routing.md). '-': not asked for.",
            )
        ],
    )


def _summary_section(
    matrix: RunsMatrix,
    envelope: Envelope,
    tiers: Mapping[str, TierSolution],
    *,
    policy_id: str,
    filters: Mapping[str, str] | None,
    randomize: bool,
) -> Section:
    """What was calibrated (runs, filters, scorer, policy) and the envelope's size, with warnings."""
    filters_text = ", ".join(f"{c}={v}" for c, v in (filters or {}).items()) or "none"
    scorer = (
        f"external (precomputed column '{matrix.score_column}'; not servable by the gateway)"
        if matrix.scorer == "external"
        else f"{matrix.scorer} (top_k={matrix.top_k})"
    )
    return Section(
        "Summary",
        [
            f"Runs: {matrix.source}; filters: {filters_text}; {matrix.n_queries:,} queries x "
            f"{len(matrix.models)} models. Scorer: {scorer}. Policy {policy_id or '(not written)'}; "
            f"tiers are {'randomized hull mixtures' if randomize else 'deterministic envelope points'}.",
            f"Envelope: {len(envelope):,} Pareto-optimal routes from {len(envelope.pairs)} pairs of the "
            f"{len(envelope.pool)}-model pool; {len(envelope.hull)} concave-hull vertices; "
            f"{len(envelope.switching_points)} switching points.",
            *[f"Warning: {note}" for note in matrix.notes],
            *[f"Warning: {t.warning}" for t in tiers.values() if t.warning],
        ],
    )


def _models_section(envelope: Envelope) -> Section:
    """Each model's mean cost and quality, and whether it is in the envelope's pool."""
    pool = set(envelope.pool)
    return Section(
        "Models",
        [
            Table(
                ["model", "mean cost / query (USD)", "quality", "in pool"],
                [
                    [name, float(cost), float(quality), name in pool]
                    for name, cost, quality in zip(
                        envelope.model_names, envelope.model_cost, envelope.model_quality, strict=True
                    )
                ],
                caption="A model is out of the pool when another is strictly cheaper and strictly better.",
            )
        ],
    )


def _tiers_section(tiers: Mapping[str, TierSolution], default_tier: str) -> Section:
    """Each tier's objective, route(s) and expected cost, quality, escalation rate and shadow price."""
    rows = [
        [
            f"{name} (default)" if name == default_tier else name,
            solution.objective.describe(),
            routes_text(solution).replace("\n", " + "),
            solution.cost,
            solution.quality,
            solution.escalation_rate,
            solution.shadow_price,
        ]
        for name, solution in tiers.items()
    ]
    return Section(
        "Tiers",
        [
            Table(
                [
                    "tier",
                    "objective",
                    "route(s)",
                    "exp. cost (USD)",
                    "exp. quality",
                    "escalation rate",
                    "shadow price (quality/USD)",
                ],
                rows,
                caption="Expected values on the calibration queries; shadow price = slope of the concave "
                "hull at the tier's cost.",
            )
        ],
    )


def _plots_section(plots: Mapping[str, Path], routed: bool = False) -> Section:
    """The envelope and shadow-price plots (``write_calibration_plots``'s files), embedded."""
    mechanisms = (
        " The router over its price sweep (purple) and route-then-cascade (pink), fitted on the same "
        "queries (in sample, as the envelope)."
        if routed
        else ""
    )
    return Section(
        "Plots",
        [
            Figure.from_file(
                plots["envelope"],
                "Pair frontiers (grey), envelope (bold), concave hull (dashed), switching points "
                "(diamonds), single models (dots) and tiers (stars). Log cost axis." + mechanisms,
            ),
            Figure.from_file(plots["shadow_price"], "Shadow price along the concave hull."),
        ],
    )


def _switching_section(envelope: Envelope) -> Section:
    """The envelope's switching points: where its best route changes, from which to which."""
    return Section(
        "Switching points",
        [
            Table(
                ["cost (USD)", "quality", "from", "to"],
                [
                    [
                        float(envelope.cost[i]),
                        float(envelope.quality[i]),
                        envelope.route_label(i - 1),
                        envelope.route_label(i),
                    ]
                    for i in envelope.switching_points
                ],
            )
        ],
    )


def _hull_section(envelope: Envelope) -> Section:
    """The vertices of the envelope's concave hull with their routes."""
    return Section(
        "Concave-hull vertices",
        [
            Table(
                ["cost (USD)", "quality", "escalation rate", "route"],
                [
                    [
                        float(envelope.cost[i]),
                        float(envelope.quality[i]),
                        float(envelope.escalation_rate[i]),
                        envelope.route_label(int(i)),
                    ]
                    for i in envelope.hull
                ],
            )
        ],
    )


def bounds_section(bounds: Mapping[str, Mapping[str, Any]], default_tier: str) -> Section:
    """Per tier, the one-sided bounds at the policy's confidence (``calibration.bounds``) and
    whether they prove the tier's objective."""
    rows: list[list[object]] = []
    for tier, document in bounds.items():
        low, high = document["escalation"]
        more = document.get("more_queries")
        rows.append(
            [
                f"{tier} (default)" if tier == default_tier else tier,
                document["quality_min"],
                document["cost_max"],
                f"[{low:.4f}, {high:.4f}]",
                document["target"],
                "yes" if document["target_certified"] else (f"no, ~{more:,} more queries" if more else "no"),
            ]
        )
    first = next(iter(bounds.values()))
    return Section(
        f"Tier bounds at {first['confidence']:.0%}",
        [
            Table(
                ["tier", "quality at least", "cost at most (USD)", "escalation", "target", "certified"],
                rows,
                caption=f"Each route chosen on {first['selection_n']:,} queries and certified on the other "
                f"{first['n']:,} ({', '.join(f'{k}: {v}' for k, v in first['estimators'].items())}); the "
                "statements hold together at the confidence shown (docs/calibrate.md#bounds).",
            )
        ],
    )


def filters_suffix(filters: Mapping[str, str] | None) -> str:
    """' (where dataset=mmlu, prompt_variant=first)' for plot titles, or '' without filters."""
    if not filters:
        return ""
    return " (where " + ", ".join(f"{column}={value}" for column, value in filters.items()) + ")"


def write_calibration_report(
    directory: str | Path,
    matrix: RunsMatrix,
    envelope: Envelope,
    tiers: Mapping[str, TierSolution],
    default_tier: str,
    *,
    policy_id: str = "",
    filters: Mapping[str, str] | None = None,
    randomize: bool = False,
    mechanisms: Mapping[str, MechanismChoice] | None = None,
    curves: MechanismCurves | None = None,
    bounds: Mapping[str, Mapping[str, Any]] | None = None,
) -> Path:
    """Write envelope.png, shadow_price.png and report.html into ``directory``; returns the page.
    With ``cascade calibrate --mechanisms``: each tier's ``mechanisms`` held out, and the router's
    and hybrid's ``curves`` on the envelope plot."""
    directory = Path(directory)
    title = f"Envelope of {Path(matrix.source).name}" + filters_suffix(filters)
    plots = write_calibration_plots(directory, envelope, tiers, title=title, curves=curves)
    sections = calibration_sections(
        matrix,
        envelope,
        tiers,
        default_tier,
        plots,
        policy_id=policy_id,
        filters=filters,
        randomize=randomize,
        mechanisms=mechanisms,
        bounds=bounds,
    )
    return write_html_report(directory / REPORT_PAGE, "Cascade calibration", sections, subtitle=matrix.source)
