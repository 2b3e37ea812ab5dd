"""The held-out table of a demo policy, and how the demo banner prints it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from localpool.demo_cli import heldout_path, heldout_text, usage_text
from localpool.heldout_table import build_table, markdown


@pytest.fixture
def report(tmp_path: Path) -> Path:
    """A small evaluate report: 3 splits, a 4-point grid, two models and the envelope."""
    directory = tmp_path / "report"
    directory.mkdir()
    summary = {
        "command": "cascade evaluate runs.jsonl --report report",
        "settings": {"splits": 3},
        "n_queries": 100,
        "models": [
            {"model": "fast", "mean_cost_usd": 1e-6, "test_quality_median": 0.5},
            {"model": "think", "mean_cost_usd": 1e-5, "test_quality_median": 0.9},
        ],
        "methods": {"envelope": {"normalized_gain": 0.3}, "envelope_hull": {"normalized_gain": 0.35}},
    }
    (directory / "summary.json").write_text(json.dumps(summary))
    grid = np.array([1e-6, 3e-6, 6e-6, 1e-5])
    quality = np.array([[0.5, 0.7, 0.86, 0.9], [0.5, 0.72, 0.87, 0.9], [0.52, 0.68, 0.85, 0.88]])
    cost = np.tile(grid * 0.95, (3, 1))
    np.savez(
        directory / "curves.npz",
        grid=grid,
        envelope_quality=quality,
        envelope_cost=cost,
        envelope_hull_quality=quality,
        envelope_hull_cost=cost,
    )
    return directory


def test_table_reads_tier_budgets_and_the_95_percent_point(report: Path, tmp_path: Path) -> None:
    tiers = tmp_path / "tiers.yaml"
    tiers.write_text("tiers:\n  economy: {max_cost_usd: 0.000003}\n  quality: {max_cost_usd: 0.00002}\n")
    table = build_table(report, tiers)
    assert table["best_single"]["model"] == "think"
    economy = next(r for r in table["tiers"] if r["tier"] == "economy" and r["method"] == "envelope")
    assert economy["quality"] == pytest.approx(0.7) and economy["cost_usd"] == pytest.approx(3e-6 * 0.95)
    assert (economy["quality_p10"], economy["quality_p90"]) == pytest.approx((0.684, 0.716))
    reach = table["reach_95_percent_of_best"]["envelope"]
    assert reach["budget_usd"] == pytest.approx(6e-6) and reach["quality"] == pytest.approx(0.86)
    text = markdown(table)
    assert "| think alone | 0.900 | $1e-05 | 100%, 100% |" in text
    assert "envelope 0.300, hull mixtures 0.350" in text


def test_banner_prints_tiers_against_the_best_single_model(report: Path, tmp_path: Path) -> None:
    tiers = tmp_path / "tiers.yaml"
    tiers.write_text("tiers:\n  balanced: {max_cost_usd: 0.000006}\n")
    banner = usage_text("http://127.0.0.1:8080", ["balanced"], build_table(report, tiers))
    assert "best single: think" in banner
    line = next(li for li in banner.splitlines() if "cascade/balanced" in li)
    assert "0.860" in line and "96%, 57%" in line
    assert '"temperature": 0' in banner and 'model="cascade/balanced", temperature=0,' in banner
    assert "max_tokens" not in banner.split("The demo policy")[0]  # the members' defaults apply
    assert heldout_path(Path("policies/local-demo.json")) == Path("policies/local-demo-heldout.json")
    assert heldout_text(build_table(report, tiers)).startswith("Held out (3 random halves of 100")


def test_banner_names_a_cascade_command_that_runs(tmp_path: Path) -> None:
    import shlex
    import subprocess

    banner = usage_text("http://127.0.0.1:8080", ["balanced"])
    command = banner.split("Pool: ")[1].split("    Stop")[0]
    result = subprocess.run([*shlex.split(command)[:1], "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
