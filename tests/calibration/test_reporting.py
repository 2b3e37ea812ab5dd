"""The HTML report writer and the calibration plots."""

from __future__ import annotations

import base64
from pathlib import Path

from runs_factory import four_model_example

from calibration.envelope import compute_envelope
from calibration.reporting.calibration_plots import write_calibration_plots
from calibration.reporting.html import Figure, Preformatted, Section, Table, write_html_report
from calibration.tiers import TierObjective, solve_tier

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
