"""``cascade recalibrate`` on traffic of two request kinds: a section per kind, as ``cascade calibrate``
writes it, with held-out expectations; each kind compared on its own held-out queries.

The traffic (tests/support/traffic_kinds.py): on text the small model agrees with the reference 55%
of the time, on tool calls 90%, so a policy that mixed the kinds' rows would show ~0.69 for both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from calibration.commands.recalibrate_cli import REFUSED_EXIT_CODE
from calibration.policy.calibrate import calibrate
from calibration.policy.kinds import calibrate_kinds
from calibration.runs import load_runs
from calibration.splits import stratified_splits
from calibration.tiers import parse_tiers
from cascade_cli.main import app
from policies import load_policy, save_policy
from policies.kinds import kind_policy
from policies.schema import Policy
from tests.support.traffic_kinds import TIERS, store_rows, tiers_file, two_kinds
from traffic.export import write_runs
from traffic.rows import TrafficRow

runner = CliRunner()


def recalibrate(store: str, tmp_path: Path, *extra: str) -> Any:
    args = ["recalibrate", "--store", store, "--tiers", str(tiers_file(tmp_path / "tiers.yaml")), *extra]
    return runner.invoke(app, args)


def calibrated_policy(rows: list[TrafficRow], path: Path) -> Policy:
    """Rows exported and calibrated per kind, as ``cascade traffic export`` + ``cascade calibrate``."""
    runs = path.with_suffix(".runs.jsonl")
    write_runs(rows, runs)
    matrices = {kind: load_runs(runs, kind=kind) for kind in ("text", "tool_call")}
    policy = calibrate_kinds(matrices, parse_tiers(TIERS)).policy
    save_policy(policy, path)
    return policy


def calibration_half(rows: list[TrafficRow], kind: str, seed: int = 0) -> list[TrafficRow]:
    """The rows of ``kind``'s calibration queries, in the order recalibrate takes them (split 0)."""
    ids = list(dict.fromkeys(r.query_id for r in rows if r.kind == kind))
    split = stratified_splits(len(ids), n_splits=1, test_fraction=0.5, seed=seed)[0]
    by_query: dict[str, list[TrafficRow]] = {}
    for row in rows:
        by_query.setdefault(row.query_id, []).append(row)
    return [row for index in split.calibration for row in by_query[ids[index]]]


def test_two_kinds_give_a_tool_call_section_with_held_out_expectations(
    store_url: str, tmp_path: Path
) -> None:
    store_rows(store_url, two_kinds(300, 200, seed=11))
    output, report = tmp_path / "new.json", tmp_path / "report.json"
    result = recalibrate(store_url, tmp_path, "-o", str(output), "--json", str(report))
    assert result.exit_code == 0, result.output
    policy = load_policy(output)
    assert policy.kinds is not None and set(policy.kinds) == {"tool_call"}
    # Each kind's model statistics come from its own rows only.
    assert policy.models["small"].quality < 0.65
    assert policy.kinds["tool_call"].models["small"].quality > 0.8
    for kind in ("text", "tool_call"):
        for name, tier in kind_policy(policy, kind).tiers.items():
            held = tier.expected.heldout
            assert held is not None, f"{kind}/{name} has no held-out expectation"
            assert held.splits == 50 and held.quality.low <= held.quality.mean <= held.quality.high
    document = json.loads(report.read_text())
    assert document["decision"]["accepted"] is True
    assert document["new_policy"]["kind"] == "text"
    assert (document["data"]["queries"], document["data"]["calibration_queries"]) == (300, 150)
    tool = document["kinds"]["tool_call"]
    assert tool["section"] == "kinds.tool_call"
    assert (tool["data"]["queries"], tool["data"]["heldout_queries"]) == (200, 100)
    assert set(tool["tiers"]) == {"economy", "balanced"}
    expected = policy.kinds["tool_call"].tiers["economy"].expected
    assert tool["tiers"]["economy"]["new"]["expected"]["heldout"]["quality"]["mean"] == pytest.approx(
        expected.heldout.quality.mean if expected.heldout else None
    )
    assert "Kind tool_call (kinds.tool_call)" in result.output


def test_each_kind_is_calibrated_as_cascade_calibrate_calibrates_its_calibration_half(
    file_url: str, tmp_path: Path
) -> None:
    rows = two_kinds(200, 160, seed=5)
    store_rows(file_url, rows)
    output = tmp_path / "new.json"
    assert recalibrate(file_url, tmp_path, "-o", str(output)).exit_code == 0
    new = load_policy(output)
    spec = parse_tiers(TIERS)
    for kind in ("text", "tool_call"):
        half = tmp_path / f"{kind}-half.jsonl"
        write_runs(calibration_half(rows, kind), half)
        alone = calibrate(load_runs(half), spec).policy  # one kind: cascade calibrate's top level
        served = kind_policy(new, kind)
        assert set(served.models) == set(alone.models)
        for model, stats in alone.models.items():  # equal up to the order of a float sum
            assert served.models[model].quality == pytest.approx(stats.quality)
            assert served.models[model].mean_cost_usd == pytest.approx(stats.mean_cost_usd)
        for name, tier in alone.tiers.items():
            assert served.tiers[name].routes == tier.routes
            assert served.tiers[name].expected.quality == pytest.approx(tier.expected.quality)
            assert served.tiers[name].expected.cost_usd == pytest.approx(tier.expected.cost_usd)


def test_each_kind_is_compared_with_the_routes_the_current_policy_serves_it_with(
    file_url: str, tmp_path: Path
) -> None:
    current = calibrated_policy(two_kinds(400, 300, seed=21), tmp_path / "current.json")
    assert current.kinds is not None and "tool_call" in current.kinds
    store_rows(file_url, two_kinds(300, 200, seed=22))
    report = tmp_path / "report.json"
    result = recalibrate(
        file_url, tmp_path, "--current", str(tmp_path / "current.json"), "--json", str(report)
    )
    assert result.exit_code in (0, REFUSED_EXIT_CODE), result.output
    document = json.loads(report.read_text())
    for kind, tiers in (("text", document["tiers"]), ("tool_call", document["kinds"]["tool_call"]["tiers"])):
        for name, tier in tiers.items():
            promised = kind_policy(current, kind).tiers[name].expected.quality
            assert tier["current"]["expected"]["quality"] == pytest.approx(promised)
    # The section's promise differs from the top level's: the comparison read the right one.
    assert (
        current.kinds["tool_call"].tiers["economy"].expected.quality
        > current.tiers["economy"].expected.quality
    )


def test_a_kind_the_current_policy_serves_apart_refuses_a_window_too_thin_to_recalibrate_it(
    file_url: str, tmp_path: Path
) -> None:
    calibrated_policy(two_kinds(300, 200, seed=31), tmp_path / "current.json")
    store_rows(file_url, two_kinds(300, 30, seed=32))
    output = tmp_path / "new.json"
    result = recalibrate(
        file_url, tmp_path, "--current", str(tmp_path / "current.json"), "-o", str(output), "--no-heldout"
    )
    assert result.exit_code == REFUSED_EXIT_CODE, result.output
    text = " ".join(result.output.split())
    assert "kind tool_call: not calibrated: only 30 complete queries with a score (--min-queries 100)" in text
    assert (
        "serves tool_call requests with section kinds.tool_call, which the new policy cannot recalibrate"
        in text
    )
    new = load_policy(output)  # written for inspection: text only, no held-out expectations asked
    assert new.kinds is None
    assert all(tier.expected.heldout is None for tier in new.tiers.values())


def test_too_few_queries_of_every_kind_is_an_error_naming_each_kind(file_url: str, tmp_path: Path) -> None:
    store_rows(file_url, two_kinds(60, 40, seed=41))
    result = recalibrate(file_url, tmp_path)
    assert result.exit_code == 1
    assert " ".join(result.output.split()).endswith(
        "error: only 60 complete queries with a score in any request kind (text 60, tool_call 40) "
        "(0 incomplete dropped); recalibrate needs at least 100 (--min-queries)"
    )
