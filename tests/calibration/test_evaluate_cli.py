"""``cascade evaluate`` end to end: real plaut-mc MMLU data, a report directory, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner, Result

from cascade_cli.main import app
from tests.support.data_files import PLAUT_MC, PLAUT_RUNS

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def evaluate(*args: str | Path) -> Result:
    """``cascade evaluate ARGS`` (each argument as text)."""
    return CliRunner().invoke(app, ["evaluate", *map(str, args)])


def evaluate_plaut_mc(report: Path, *args: str) -> Result:
    """``cascade evaluate`` on the plaut-mc runs at their prices, scored by maximum softmax
    probability, with ``args``, reporting to ``report``."""
    runs, prices = PLAUT_MC / "runs.csv.gz", PLAUT_MC / "prices.yaml"
    return evaluate(runs, "--prices", prices, "--score-column", "score_msp", *args, "--report", report)


@pytest.fixture(scope="module")
def plaut_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    report = tmp_path_factory.mktemp("evaluate") / "report"
    mmlu = ("--where", "dataset=mmlu", "--where", "prompt_variant=first")
    result = evaluate_plaut_mc(report, *mmlu, "--splits", "3", "--trials", "20")
    return result, report


def test_evaluate_writes_every_report_file(plaut_report) -> None:
    result, report = plaut_report
    assert result.exit_code == 0, result.output
    for name in ("summary.json", "curves.npz", "report.html"):
        assert (report / name).stat().st_size > 0
    for name in ("heldout_comparison.png", "escalation_benefit.png"):
        assert (report / name).read_bytes().startswith(PNG_SIGNATURE)
    page = (report / "report.html").read_text()
    assert "data:image/png;base64," in page and 'src="http' not in page


def test_envelope_beats_every_baseline_held_out_and_keeps_its_cost(plaut_report) -> None:
    """What must hold on aligned data: positive gain, ahead of single models and searched chains.

    Measured on these settings (3 splits, 20 trials): envelope gain 0.297 (CR@90 65.2), hull
    mixtures 0.307, best single model -0.073, fixed chain -0.026, subsequence searches 0.137-0.138;
    envelope cost overrun on test halves +1.7% at the 90th percentile.
    """
    _, report = plaut_report
    summary = json.loads((report / "summary.json").read_text())
    assert summary["n_queries"] == 6000 and summary["n_test_rows"] == 3000
    runs = pd.read_csv(PLAUT_RUNS, usecols=["dataset", "model"])
    assert {model["model"] for model in summary["models"]} == set(runs[runs.dataset == "mmlu"].model)
    assert all(0.4 < model["auroc"] < 0.9 for model in summary["models"])
    low, best = summary["endpoints"]["low"], summary["endpoints"]["best"]
    assert low["cost_usd"] == min(model["mean_cost_usd"] for model in summary["models"])
    assert best["quality"] == max(model["quality"] for model in summary["models"])
    assert (low["model"], best["model"]) == ("Yi-6b", "gpt-4-turbo")

    methods = summary["methods"]
    envelope = methods["envelope"]
    for name in ("envelope", "envelope_hull"):
        assert 0.2 < methods[name]["normalized_gain"] < 1.0, name
        assert 50.0 < methods[name]["cr90_percent"] < 100.0, name  # 90% of the best at half its cost
        assert methods[name]["test_overrun_p90"] < 0.05, name  # held-out cost within 5% of the plan
    assert methods["envelope_hull"]["normalized_gain"] >= envelope["normalized_gain"] - 0.02
    baselines = ("single", "fixed_chain", "subsequence_nsga2", "subsequence_random")
    for name in baselines:
        assert -1.0 < methods[name]["normalized_gain"] < envelope["normalized_gain"] - 0.1, name
        cr90 = methods[name]["cr90_percent"]
        assert cr90 is None or cr90 < envelope["cr90_percent"], name
    # The envelope's top end is the best model itself: no cascade quality above it on held-out data.
    test_best = max(model["test_quality_median"] for model in summary["models"])
    assert envelope["quality_at_max_budget"] == pytest.approx(test_best, abs=0.01)
    # Single models save nothing at 90% of the best when no cheaper model reaches it.
    cheaper = [m["quality"] for m in summary["models"] if m["mean_cost_usd"] < best["cost_usd"]]
    assert max(cheaper) < 0.9 * best["quality"] and methods["single"]["cr90_percent"] == 0.0


def test_router_without_features_is_skipped_and_said_once(plaut_report) -> None:
    result, report = plaut_report
    summary = json.loads((report / "summary.json").read_text())
    router = summary["methods"]["router"]
    assert router["skipped"] and "--feature-columns" in router["skipped"]
    assert result.output.count("router skipped") == 1
    assert result.output.count("no per-query features") == 1


def test_curves_file_holds_per_split_curves_on_a_500_point_grid(plaut_report) -> None:
    _, report = plaut_report
    with np.load(report / "curves.npz") as curves:
        assert curves["grid"].shape == (500,)
        assert curves["envelope_quality"].shape == (3, 500)
        assert curves["envelope_median"].shape == (500,)
        assert np.all(curves["envelope_p10"] <= curves["envelope_p90"])
        assert "router_quality" not in curves.files


def test_terminal_summary_shows_the_method_table(plaut_report) -> None:
    result, _ = plaut_report
    assert "Held-out comparison" in result.output
    assert "envelope" in result.output and "CR@90" in result.output


def test_router_runs_when_feature_columns_are_given(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    lines = ["query_id,model,correct,cost_usd,confidence,hardness"]
    for i in range(120):
        hardness = rng.random()
        for model, cost, skill in (("small", 1e-5, 0.4), ("large", 1e-4, 0.9)):
            correct = int(hardness < skill)
            confidence = min(1.0, max(0.0, 0.3 + 0.4 * correct + rng.normal(0, 0.1)))
            lines.append(f"q{i},{model},{correct},{cost},{confidence:.4f},{hardness:.4f}")
    runs = tmp_path / "runs.csv"
    runs.write_text("\n".join(lines) + "\n")
    report = tmp_path / "out"
    result = evaluate(
        runs,
        "--score-column",
        "confidence",
        "--feature-columns",
        "hardness",
        "--splits",
        "2",
        "--methods",
        "envelope,router",
        "--report",
        report,
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((report / "summary.json").read_text())
    assert set(summary["methods"]) == {"envelope", "router"}
    assert summary["methods"]["router"]["skipped"] is None
    assert summary["methods"]["router"]["normalized_gain"] is not None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--methods", "envelope,nonsense"], "unknown method 'nonsense'"),
        (["--where", "dataset=nothing"], "no rows"),
    ],
)
def test_bad_arguments_fail_with_one_red_line(tmp_path: Path, extra, message) -> None:
    result = evaluate_plaut_mc(tmp_path / "r", *extra)
    assert result.exit_code == 1
    assert message in result.output
    assert "Traceback" not in result.output


def test_missing_runs_file_is_a_one_line_error(tmp_path: Path) -> None:
    result = evaluate(tmp_path / "absent.csv", "--report", tmp_path / "r")
    assert result.exit_code == 1
    assert "no such file" in result.output and "Traceback" not in result.output
