"""The HTML report writer and the calibration plots."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
from runs_factory import four_model_example, make_matrix

from calibration.envelope import compute_envelope
from calibration.evaluation.protocol import EvaluationSettings, run_evaluation
from calibration.reporting.calibration_plots import envelope_figure, write_calibration_plots
from calibration.reporting.calibration_report import filters_suffix
from calibration.reporting.evaluation_plots import heldout_comparison_figure
from calibration.reporting.html import Figure, Preformatted, Section, Table, write_html_report
from calibration.runs import load_runs
from calibration.tiers import TierObjective, load_tiers, solve_tier, solve_tiers
from tests.support.data_files import PLAUT_PRICES, PLAUT_RUNS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_html_report_embeds_figures_and_escapes_text(tmp_path: Path) -> None:
    png = PNG_MAGIC + b"fake"
    page = write_html_report(
        tmp_path / "sub/report.html",
        "Report <1>",
        [
            Section(
                "Text & tables",
                ["a <b>bold</b> claim", Table(["x", "y"], [[0.123456, None], ["<i>", True]])],
            ),
            Section("Figures", [Figure(png, caption="cap"), Preformatted("cascade calibrate <runs>")]),
        ],
    )
    html = page.read_text()
    assert "<title>Report &lt;1&gt;</title>" in html
    assert "a &lt;b&gt;bold&lt;/b&gt; claim" in html
    assert '<td class="num">0.1235</td>' in html and "<td>—</td>" in html and "<td>yes</td>" in html
    assert f"data:image/png;base64,{base64.b64encode(png).decode()}" in html
    assert "cascade calibrate &lt;runs&gt;" in html


def test_calibration_plots_are_png_files(tmp_path: Path) -> None:
    envelope = compute_envelope(four_model_example())
    tiers = {"t": solve_tier(envelope, TierObjective(max_cost_usd=2.0), name="t")}
    written = write_calibration_plots(tmp_path, envelope, tiers)
    assert set(written) == {"envelope", "shadow_price"}
    for path in written.values():
        assert path.read_bytes()[:8] == PNG_MAGIC
    figure = Figure.from_file(written["envelope"], "envelope")
    assert figure.png[:8] == PNG_MAGIC


def _boxes(figure, annotations):
    renderer = figure.canvas.get_renderer()
    return [annotation.get_window_extent(renderer) for annotation in annotations]


def test_envelope_labels_on_crowded_real_data_do_not_overprint(repo_root: Path) -> None:
    """plaut-mc MMLU: three models share one price and two sit within 0.0003 quality of each other."""
    filters = {"dataset": "mmlu", "prompt_variant": "first"}
    matrix = load_runs(
        PLAUT_RUNS,
        prices=PLAUT_PRICES,
        score_column="score_msp",
        where=filters,
    )
    envelope = compute_envelope(matrix)
    tiers = solve_tiers(envelope, load_tiers(repo_root / "calibration/examples/tiers.yaml"))
    figure = envelope_figure(envelope, tiers, title="Envelope of runs.csv.gz" + filters_suffix(filters))
    axes = figure.axes[0]
    assert axes.get_title() == "Envelope of runs.csv.gz (where dataset=mmlu, prompt_variant=first)"
    annotations = [child for child in axes.texts if child.get_text()]
    assert sorted(a.get_text() for a in annotations) == sorted([*matrix.models, *tiers])
    boxes = _boxes(figure, annotations)
    for i, first in enumerate(boxes):
        for second in boxes[i + 1 :]:
            assert not first.overlaps(second), (first, second)
    points = axes.transData.transform(
        [(c, q) for c, q in zip(envelope.model_cost, envelope.model_quality, strict=True)]
        + [(t.cost, t.quality) for t in tiers.values()]
    )
    bold = next(line for line in axes.get_lines() if line.get_linewidth() > 2)  # the envelope
    samples = _line_samples_of(axes, bold)
    for annotation, box in zip(annotations, boxes, strict=True):
        assert not any(box.contains(x, y) for x, y in points), annotation.get_text()
        if annotation.get_text() in tiers:  # tier names are never crossed by the envelope
            assert not any(box.contains(x, y) for x, y in samples), annotation.get_text()


def _line_samples_of(axes, line):
    xy = axes.transData.transform(np.column_stack(line.get_data()))
    t = np.linspace(0, 1, 20)[:, None, None]
    return (xy[:-1] + (xy[1:] - xy[:-1]) * t).reshape(-1, 2)


def test_heldout_comparison_title_names_the_filters_and_crowded_labels_stay_apart() -> None:
    rng = np.random.default_rng(0)
    n = 200
    names = ["tiny-a", "tiny-b", "tiny-c", "mid-a", "mid-b", "large"]
    costs = [1.0, 1.0, 1.0, 3.0, 3.05, 20.0]  # three at one price, two almost at another
    skills = [0.4, 0.42, 0.44, 0.6, 0.6, 0.85]
    matrix = make_matrix(
        names,
        quality=[(rng.random(n) < skill).astype(float) for skill in skills],
        cost=[[cost] * n for cost in costs],
        score=[rng.random(n) for _ in names],
    )
    settings = EvaluationSettings(splits=2, methods=("envelope", "single"), grid_points=50)
    figure = heldout_comparison_figure(run_evaluation(matrix, settings), " (where dataset=mmlu)")
    axes = figure.axes[0]
    assert axes.get_title().startswith("Held-out comparison (where dataset=mmlu)\n2 splits")
    labels = [text for text in axes.texts if text.get_text() in names]
    assert sorted(text.get_text() for text in labels) == sorted(names)
    boxes = _boxes(figure, labels)
    for i, first in enumerate(boxes):
        for second in boxes[i + 1 :]:
            assert not first.overlaps(second), (first, second)
