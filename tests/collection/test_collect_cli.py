"""``cascade collect`` end to end against the scripted OpenAI-compatible upstream on loopback."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from calibration.runs import load_runs
from cascade_cli.main import app
from tests.support.data_files import UPSTREAM_ANSWERS
from tests.support.scripted_upstream import Reply, ScriptedUpstream


@pytest.fixture
def llamacpp_upstream(upstream: ScriptedUpstream) -> ScriptedUpstream:
    """The scripted upstream answering both models with a real llama.cpp body (top-15 logprobs)."""
    body = orjson.loads((UPSTREAM_ANSWERS / "llamacpp_smol_top15.json").read_bytes())
    for model in ("smol", "big"):
        upstream.set_default(model, Reply(body=body))
    return upstream


def _config(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        f"""models:
  cheap: {{base_url: "{url}", model: smol, price: {{input_per_mtok: 1.0, output_per_mtok: 1.0}}}}
  dear: {{base_url: "{url}", model: big, price: {{per_query_usd: 0.01}}}}
policy: unused.json
"""
    )
    return path


def _prompts(tmp_path: Path) -> Path:
    path = tmp_path / "set.jsonl"
    rows = [
        {
            "query_id": "paris",
            "prompt": "Capital of France?",
            "answer": "Paris",
            "grader": "exact_match",
            "aliases": ["The capital of France is Paris."],
        },
        {"query_id": "rome", "prompt": "Capital of Italy?", "answer": "Rome", "grader": "exact_match"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_collect_writes_a_runs_table_that_calibration_loads(
    tmp_path: Path, llamacpp_upstream: ScriptedUpstream
) -> None:
    url, seen = llamacpp_upstream.base_url, llamacpp_upstream.requests
    runs = tmp_path / "runs.jsonl"
    args = [
        "collect",
        str(_prompts(tmp_path)),
        "-o",
        str(runs),
        "--config",
        str(_config(tmp_path, url)),
        "-k",
        "5",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert len(seen) == 4 and {r.model for r in seen} == {"smol", "big"}
    rows = [json.loads(line) for line in runs.read_text().splitlines()]
    assert {r["query_id"]: r["correct"] for r in rows if r["model"] == "cheap"} == {"paris": 1.0, "rome": 0.0}
    assert {r["cost_usd"] for r in rows if r["model"] == "dear"} == {0.01}

    matrix = load_runs(runs, scorer="mean_token_negentropy", top_k=5)
    assert matrix.models == ("cheap", "dear")  # ordered by mean cost
    assert matrix.score.shape == (2, 2) and (matrix.score > 0).all()

    again = CliRunner().invoke(app, args)  # everything is done: nothing is sent again
    assert again.exit_code == 0 and len(seen) == 4
    assert "skipped 4 already done" in again.output


def test_unknown_model_is_a_one_line_error(tmp_path: Path, llamacpp_upstream: ScriptedUpstream) -> None:
    url = llamacpp_upstream.base_url
    args = [
        "collect",
        str(_prompts(tmp_path)),
        "-o",
        str(tmp_path / "r.jsonl"),
        "--config",
        str(_config(tmp_path, url)),
        "-m",
        "cheap,ghost",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    assert "error: unknown model ghost" in result.output
    assert "Traceback" not in result.output
