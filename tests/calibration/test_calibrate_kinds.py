"""Calibration per request kind: the ``kind`` column splits the runs, each kind calibrated alike.

Small synthetic runs tables (JSONL): text rows (some without a ``kind`` cell, which means text)
and tool-call rows on which the same models behave differently, so their routes differ.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from calibration.bounds import BoundSettings
from calibration.commands.calibrate_cli import register as register_calibrate
from calibration.commands.evaluate_cli import register as register_evaluate
from calibration.heldout_expected import HeldoutSettings
from calibration.policy.calibrate import calibrate
from calibration.policy.kinds import calibrate_kinds, load_runs_by_kind
from calibration.runs import load_runs
from calibration.runs_columns import RunsError
from calibration.tiers import parse_tiers
from policies.kinds import kind_policy
from policies.store import load_policy

TIERS = {
    "default_tier": "balanced",
    "tiers": {"economy": {"max_cost_usd": 2.5}, "balanced": {"max_cost_usd": 6}},
}
# Per kind: (skill of "small", skill of "large"): the small model is weak on text, strong on tools.
SKILLS = {"text": (0.35, 0.9), "tool_call": (0.75, 0.95)}


def rows_for(kind: str, n: int, seed: int, *, write_kind: bool = True) -> list[dict[str, Any]]:
    """``n`` queries of ``kind`` answered by small (cost 1) and large (cost 10), informative scores."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        difficulty = rng.random()
        for model, skill, cost in zip(("small", "large"), SKILLS[kind], (1.0, 10.0), strict=True):
            correct = float(difficulty < skill)
            row = {
                "query_id": f"{kind}-{i}",
                "model": model,
                "correct": correct,
                "cost_usd": cost,
                "score": round(float(np.clip(0.5 * correct + rng.normal(0.25, 0.15), 0, 1)), 4),
            }
            if write_kind:
                row["kind"] = kind
            rows.append(row)
    return rows


def write_runs(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def tiers_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiers.yaml"
    path.write_text(json.dumps(TIERS))  # JSON is YAML
    return path


def cli() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """Only the calibration commands."""

    register_calibrate(app)
    register_evaluate(app)
    return app


def invoke(*args: str | Path) -> Any:
    return CliRunner().invoke(cli(), list(map(str, args)))


@pytest.fixture
def mixed_runs(tmp_path: Path) -> Path:
    # Half the text rows carry no kind at all (a runs table from before the column): still text.
    text = rows_for("text", 120, seed=1, write_kind=False)[:120] + rows_for("text", 120, seed=2)[120:]
    return write_runs(tmp_path / "runs.jsonl", text + rows_for("tool_call", 100, seed=3))


def test_runs_rows_are_grouped_by_kind_missing_kind_being_text(mixed_runs: Path) -> None:
    matrices = load_runs_by_kind(mixed_runs, score_column="score")
    assert list(matrices) == ["text", "tool_call"]
    assert matrices["text"].n_queries == 120 and matrices["tool_call"].n_queries == 100
    assert all(q.startswith("tool_call-") for q in matrices["tool_call"].query_ids)
    assert load_runs(mixed_runs, score_column="score").n_queries == 220  # no kind: every row


def test_calibrate_writes_the_text_top_level_and_a_tool_section_each_as_calibrated_alone(
    mixed_runs: Path, tmp_path: Path
) -> None:
    out = tmp_path / "policy.json"
    result = invoke(
        "calibrate", mixed_runs, "--tiers", tiers_file(tmp_path), "-o", out, "--score-column", "score"
    )
    assert result.exit_code == 0, result.output
    assert "kind tool_call: 100 queries -> section kinds.tool_call" in result.output
    policy = load_policy(out)
    assert policy.kinds is not None and list(policy.kinds) == ["tool_call"]
    spec = parse_tiers(TIERS)
    for kind, served in (("text", policy), ("tool_call", kind_policy(policy, "tool_call"))):
        # As the command calibrates it: with bounds (each tier serving its selection half's route).
        alone = calibrate(
            load_runs(mixed_runs, score_column="score", kind=kind), spec, bounds=BoundSettings()
        ).policy
        assert served.models == alone.models
        for name in TIERS["tiers"]:
            assert served.tiers[name].routes == alone.tiers[name].routes, (kind, name)
            assert served.tiers[name].expected.quality == alone.tiers[name].expected.quality
        assert served.envelope == alone.envelope
    # The kinds' routes really differ: the small model is good enough on tools to answer alone
    # more often, so the same budget buys a different route.
    assert policy.tiers["economy"].routes != kind_policy(policy, "tool_call").tiers["economy"].routes


def test_a_runs_table_of_tool_calls_only_calibrates_the_top_level_from_them_and_says_so(
    tmp_path: Path,
) -> None:
    runs = write_runs(tmp_path / "tools.jsonl", rows_for("tool_call", 100, seed=3))
    out = tmp_path / "policy.json"
    result = invoke("calibrate", runs, "--tiers", tiers_file(tmp_path), "-o", out, "--score-column", "score")
    assert result.exit_code == 0, result.output
    assert "no text rows" in result.output and "also serves text requests" in result.output
    policy = load_policy(out)
    alone = calibrate(load_runs(runs, score_column="score"), parse_tiers(TIERS)).policy
    assert policy.kinds is None and policy.tiers["economy"].routes == alone.tiers["economy"].routes


def test_an_unknown_kind_is_one_line_naming_the_row(tmp_path: Path) -> None:
    rows = rows_for("text", 10, seed=1)
    rows[5]["kind"] = "tools"
    runs = write_runs(tmp_path / "bad.jsonl", rows)
    with pytest.raises(RunsError, match="row 6: column 'kind': unknown kind 'tools'"):
        load_runs_by_kind(runs, score_column="score")


def test_calibrate_writes_heldout_expectations_unless_told_not_to(mixed_runs: Path, tmp_path: Path) -> None:
    tiers = tiers_file(tmp_path)
    with_heldout, without = tmp_path / "with.json", tmp_path / "without.json"
    assert (
        invoke(
            "calibrate", mixed_runs, "--tiers", tiers, "-o", with_heldout, "--score-column", "score"
        ).exit_code
        == 0
    )
    result = invoke(
        "calibrate", mixed_runs, "--tiers", tiers, "-o", without, "--score-column", "score", "--no-heldout"
    )
    assert result.exit_code == 0, result.output
    policy = load_policy(with_heldout)
    for served in (policy, kind_policy(policy, "tool_call")):
        for tier in served.tiers.values():
            assert tier.expected.heldout is not None and tier.expected.heldout.splits == 50
    plain = load_policy(without)
    assert all(t.expected.heldout is None for t in plain.tiers.values())
    assert policy.policy_id != plain.policy_id


def test_evaluate_reports_the_heldout_table_per_kind(mixed_runs: Path, tmp_path: Path) -> None:
    report = tmp_path / "report"
    result = invoke(
        "evaluate", mixed_runs, "--report", report, "--score-column", "score",
        "--splits", "5", "--methods", "envelope,single",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    for kind, n in (("text", 120), ("tool_call", 100)):
        summary = json.loads((report / kind / "summary.json").read_text())
        assert summary["n_queries"] == n, kind
        assert f"kind {kind}: {n} queries" in result.output
    assert not (report / "summary.json").exists()


def test_a_kind_too_small_to_split_is_calibrated_without_heldout_expectations(tmp_path: Path) -> None:
    runs = write_runs(
        tmp_path / "runs.jsonl", rows_for("text", 60, seed=1) + rows_for("tool_call", 1, seed=2)
    )
    matrices = load_runs_by_kind(runs, score_column="score")
    calibrated = calibrate_kinds(matrices, parse_tiers(TIERS), heldout=HeldoutSettings())
    assert calibrated.per_kind["text"].heldout is not None
    assert calibrated.per_kind["tool_call"].heldout is None
    assert "no held-out expectations" in calibrated.per_kind["tool_call"].notes[0]
    section = kind_policy(calibrated.policy, "tool_call")
    assert all(t.expected.heldout is None for t in section.tiers.values())
