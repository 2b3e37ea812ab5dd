"""Human-readable outputs of ``cascade evaluate``: the rich terminal tables and the HTML page."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table as RichTable

from calibration.evaluation.protocol import EvaluationResult
from calibration.evaluation.summary import PROTOCOL
from calibration.reporting.html import Figure, Preformatted, Section, Table, write_html_report


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def methods_table(summary: dict) -> RichTable:
    """One row per method: normalized gain, CR@90, median test quality at mid / max budget."""
    low, best = summary["endpoints"]["low"], summary["endpoints"]["best"]
    table = RichTable(
        title=f"Held-out comparison ({summary['settings']['splits']} splits, {summary['n_test_rows']:,} test "
        f"rows each); gain endpoints {low['model']} → {best['model']}",
        title_justify="left",
    )
    table.add_column("method", no_wrap=True)
    for column in ("gain", "CR@90 %", "q @ mid", "q @ max", "overrun p90", "sec"):
        table.add_column(column, justify="right", no_wrap=True)
    for data in summary["methods"].values():
        if data["skipped"]:
            table.add_row(data["short"], "[yellow]skipped[/yellow]", "", "", "", "", "")
            continue
        table.add_row(
            data["short"],
            _fmt(data["normalized_gain"], ".3f"),
            _fmt(data["cr90_percent"], ".1f"),
            _fmt(data["quality_at_mid_budget"], ".4f"),
            _fmt(data["quality_at_max_budget"], ".4f"),
            _fmt(None if data["test_overrun_p90"] is None else 100 * data["test_overrun_p90"], "+.1f") + "%",
            f"{data['seconds']:.1f}",
        )
    return table


def models_table(summary: dict) -> RichTable:
    """Per model: full-data cost and quality, median test quality, AUROC of its score."""
    table = RichTable(title="Models (full data)", title_justify="left")
    table.add_column("model", no_wrap=True)
    for column in ("cost / query", "quality", "test q (median)", "AUROC"):
        table.add_column(column, justify="right", no_wrap=True)
    for model in summary["models"]:
        table.add_row(
            model["model"],
            f"${model['mean_cost_usd']:.4g}",
            f"{model['quality']:.4f}",
            f"{model['test_quality_median']:.4f}",
            _fmt(model["auroc"], ".3f"),
        )
    return table


def pairs_table(summary: dict) -> RichTable:
    """Per pool pair: dominance and decreasing-benefit fractions, Spearman(s_L, C_H)."""
    table = RichTable(title="Escalation diagnostics per pool pair (test halves)", title_justify="left")
    for column in ("cheap → expensive", "dominance", "decreasing", "Spearman(s_L, C_H)"):
        table.add_column(column, justify="left" if column.startswith("cheap") else "right", no_wrap=True)
    for pair in summary["pairs"]:
        spearman = pair["spearman_score_cost"]
        table.add_row(
            f"{pair['low']} → {pair['high']}",
            _fmt(pair["dominance_fraction"], ".2f"),
            _fmt(pair["decreasing_fraction"], ".2f"),
            "constant cost" if spearman is None else f"{spearman:+.3f}",
        )
    return table


def write_report_page(
    path: Path, result: EvaluationResult, summary: dict, comparison_png: bytes, benefit_png: bytes
) -> Path:
    """The self-contained HTML page: protocol, method table, plots, models, pair diagnostics."""
    sections = [
        _protocol_section(result, summary),
        _methods_section(summary, comparison_png),
        _models_section(summary),
        _benefit_section(summary, benefit_png),
    ]
    return write_html_report(path, "Held-out evaluation of LLM cascades", sections, subtitle=summary["runs"])


def _protocol_section(result: EvaluationResult, summary: dict) -> Section:
    """How the evaluation was run: splits, trials, the normalized gain's endpoints, the command."""
    low, best = summary["endpoints"]["low"], summary["endpoints"]["best"]
    settings = result.settings
    return Section(
        "Protocol",
        [
            PROTOCOL,
            f"{result.n_queries:,} queries, {len(result.models)} models; {settings.splits} splits with "
            f"test fraction {settings.test_fraction:g} ({result.n_test:,} test rows), seed "
            f"{settings.seed}, {settings.trials} search trials per split and searched method.",
            f"Endpoints of the normalized gain: {low['model']} (${low['cost_usd']:.4g}, "
            f"{low['quality']:.4f}) and {best['model']} "
            f"(${best['cost_usd']:.4g}, {best['quality']:.4f}).",
            *([Preformatted(summary["command"])] if summary.get("command") else []),
            *[f"Note: {note}" for note in result.notes],
        ],
    )


def _methods_section(summary: dict, comparison_png: bytes) -> Section:
    """Each method's held-out medians, and the comparison plot."""
    rows = [
        [
            data["label"],
            data["normalized_gain"],
            data["cr90_percent"],
            data["quality_at_mid_budget"],
            data["quality_at_max_budget"],
            data["test_overrun_p90"],
            data["skipped"] or "",
        ]
        for data in summary["methods"].values()
    ]
    return Section(
        "Methods",
        [
            Table(
                [
                    "method",
                    "normalized gain",
                    "CR@90 %",
                    "quality @ mid budget",
                    "quality @ max budget",
                    "test overrun p90",
                    "note",
                ],
                rows,
                caption="Medians over splits of held-out quality; overrun = (test cost - budget) / budget.",
            ),
            Figure(
                comparison_png,
                "Median held-out quality per budget, 10th-90th percentile bands; "
                "points: single models (median test quality, 10th-90th bars).",
            ),
        ],
    )


def _models_section(summary: dict) -> Section:
    """Each model's cost, quality and the AUROC of its score."""
    rows = [
        [m["model"], m["mean_cost_usd"], m["quality"], m["test_quality_median"], m["auroc"]]
        for m in summary["models"]
    ]
    return Section(
        "Models",
        [Table(["model", "cost / query (USD)", "quality", "test quality (median)", "AUROC of score"], rows)],
    )


def _benefit_section(summary: dict, benefit_png: bytes) -> Section:
    """The escalation benefit per pool pair: diagnostics table and plot."""
    rows = [
        [
            f"{p['low']} → {p['high']}",
            p["dominance_fraction"],
            p["decreasing_fraction"],
            "constant cost" if p["spearman_score_cost"] is None else p["spearman_score_cost"],
        ]
        for p in summary["pairs"]
    ]
    return Section(
        "Escalation benefit",
        [
            "m_H(s) - m_L(s): mean quality gained by escalating queries whose cheap-model score is s "
            "(equal-count score bins, median over the test halves, 10th-90th band). Dominance: share of "
            "bins with positive benefit. Decreasing: share of steps where the benefit does not increase "
            "(the condition for a concave pair frontier). Spearman(s_L, C_H) checks that the expensive "
            "model's cost does not depend on the cheap model's score.",
            Table(["pair", "dominance", "decreasing", "Spearman(s_L, C_H)"], rows),
            Figure(benefit_png, "Escalation benefit per pool pair."),
        ],
    )
