"""``cascade traffic export`` writes a runs table that ``cascade calibrate`` / ``evaluate`` take as is."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rows_factory import logprobs

from policies.store import load_policy
from tests.support.traffic_kinds import store_rows
from traffic.export import select_complete
from traffic.rows import TrafficRow

MODELS = ("small", "medium", "large")
COST = {"small": 0.0001, "medium": 0.0004, "large": 0.002}
TIERS = """\
default_tier: balanced
tiers:
  balanced: {max_cost_usd: 0.0012}
  accurate: {min_quality: 0.9}
"""


def cascade(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The real ``cascade`` CLI in a subprocess."""
    result = subprocess.run(
        [sys.executable, "-m", "cascade_cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"cascade {' '.join(map(str, args))} failed:\n{result.stderr}")
    return result


def sampled_traffic(n: int, seed: int = 7) -> list[TrafficRow]:
    """n sampled queries, labelled against ``large``: a confident answer agrees more often."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    rows = []
    for q in range(n):
        when = now - timedelta(minutes=q)
        for model, agreement in (("small", 0.55), ("medium", 0.75), ("large", 1.0)):
            agrees = rng.random() < agreement
            confidence = rng.uniform(0.7, 0.99) if agrees else rng.uniform(0.3, 0.8)
            rows.append(
                TrafficRow(
                    query_id=f"req-{q}",
                    model=model,
                    correct=1.0 if agrees else 0.0,
                    prompt_tokens=20,
                    completion_tokens=5,
                    cost_usd=COST[model],
                    logprobs=logprobs(confidence),
                    latency_ms=30.0,
                    timestamp=when,
                    tier="balanced",
                    policy_id="0123456789abcdef",
                    replica=f"r{q % 2}",
                    judge="reference" if model == "large" else "exact",
                )
            )
    return rows


def test_exported_traffic_calibrates_and_evaluates_with_the_real_cli(store_url: str, tmp_path: Path) -> None:
    rows = sampled_traffic(300)
    # Two gaps a sampler leaves: a shadow call that failed (no row), a judge that could not decide.
    rows = [r for r in rows if not (r.query_id == "req-3" and r.model == "medium")]
    rows = [
        r
        if not (r.query_id == "req-4" and r.model == "small")
        else TrafficRow(**{**r.__dict__, "correct": None})
        for r in rows
    ]
    store_rows(store_url, rows)
    runs = tmp_path / "runs.jsonl"
    exported = cascade("traffic", "export", "--store", store_url, "--since", "7d", "-o", runs)
    assert "dropped 2 incomplete queries" in exported.stderr
    assert "298 queries x 3 models" in exported.stderr
    lines = [json.loads(line) for line in runs.read_text().splitlines()]
    assert len(lines) == 298 * 3
    assert not {"req-3", "req-4"} & {line["query_id"] for line in lines}

    tiers = tmp_path / "tiers.yaml"
    tiers.write_text(TIERS)
    policy_path = tmp_path / "policy.json"
    cascade("calibrate", runs, "--tiers", tiers, "-o", policy_path)
    policy = load_policy(policy_path)
    assert set(policy.models) == set(MODELS)
    assert policy.tiers["balanced"].expected.cost_usd <= 0.0012 + 1e-12
    # The exported labels are what calibration measured: large agrees with itself on every query.
    assert policy.models["large"].quality == 1.0
    cascade("evaluate", runs, "--report", tmp_path / "report", "--splits", "3")
    assert (tmp_path / "report" / "summary.json").is_file()


def test_export_filters_by_time_and_column_and_writes_csv(file_url: str, tmp_path: Path) -> None:
    rows = sampled_traffic(40)  # req-q is q minutes old
    store_rows(file_url, rows)
    runs = tmp_path / "runs.csv"
    result = cascade(
        "traffic", "export", "--store", file_url, "--since", "20m", "--where", "replica=r0", "-o", runs
    )
    assert "10 queries x 3 models" in result.stderr  # req-0..req-19 within 20 minutes, even ones on r0
    header = runs.read_text().splitlines()[0].split(",")
    assert header[:3] == ["query_id", "model", "correct"] and "prompt" not in header


def test_incomplete_queries_can_fail_the_export(file_url: str, tmp_path: Path) -> None:
    rows = [r for r in sampled_traffic(5) if not (r.query_id == "req-1" and r.model == "small")]
    store_rows(file_url, rows)
    result = cascade(
        "traffic",
        "export",
        "--store",
        file_url,
        "--incomplete",
        "error",
        "-o",
        tmp_path / "r.jsonl",
        check=False,
    )
    assert result.returncode == 1
    assert "1 incomplete query" in result.stderr and "'req-1' lacks small" in result.stderr
    assert "Traceback" not in result.stderr


def test_export_from_a_store_that_is_down_is_one_error_line(tmp_path: Path) -> None:
    result = cascade(
        "traffic",
        "export",
        "--store",
        "postgresql://postgres@127.0.0.1:1/test?connect_timeout=2",
        "-o",
        tmp_path / "r.jsonl",
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("error: traffic store postgresql://postgres@127.0.0.1:1/test")
    assert "Traceback" not in result.stderr


def test_purge_command_applies_retention(file_url: str) -> None:
    store_rows(file_url, sampled_traffic(30))  # req-q is q minutes old
    result = cascade("traffic", "purge", "--store", file_url, "--older-than", "10m")
    # req-10..req-29: req-10 was exactly 10 minutes old when written, so older than that when purged.
    assert "deleted 60 rows" in result.stderr


def test_pool_can_be_named_and_other_models_are_left_out() -> None:
    rows = sampled_traffic(3)
    selection = select_complete(rows, ["small", "large"])
    assert selection.models == ("small", "large")
    assert selection.queries == 3 and selection.outside_pool == 3
    assert {r.model for r in selection.rows} == {"small", "large"}


@pytest.mark.parametrize("suffix", [".parquet", ".csv.gz", ".jsonl"])
def test_every_runs_format_reads_back_with_calibration(suffix: str, tmp_path: Path) -> None:
    from calibration.runs import load_runs
    from traffic.export import write_runs

    path = tmp_path / f"runs{suffix}"
    write_runs(sampled_traffic(20), path)
    runs = load_runs(path)
    assert runs.n_queries == 20 and set(runs.models) == set(MODELS)
