"""``--score-tokens call_values``: calibration scores a call's decisions with the function the gateway
applies (policies.scorers, tokens=call_values) and writes the option into the policy's scorer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from calibration.commands.calibrate_cli import register
from calibration.runs import load_runs
from calibration.runs_columns import RunsError
from policies.call_tokens import call_value_positions
from policies.scorers import score_logprobs
from policies.store import load_policy
from tests.support.recorded_replies import CALL_AS_CONTENT

REPLY = CALL_AS_CONTENT["reply"]
CONTENT: list[dict[str, Any]] = REPLY["choices"][0]["logprobs"]["content"]


def call_content(q: int) -> list[dict[str, Any]]:
    """The recorded call with its value tokens less likely as ``q`` grows, its formatting unchanged."""
    values = set(call_value_positions(CONTENT) or [])
    return [dict(e, logprob=e["logprob"] - 0.4 * q) if i in values else e for i, e in enumerate(CONTENT)]


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    path = tmp_path / "runs.jsonl"
    with path.open("w") as handle:
        for q in range(6):
            for model, cost in (("small", 0.001), ("large", 0.01)):
                record = {"query_id": f"q{q}", "model": model, "correct": int(model == "large" or q < 3)}
                record |= {"cost_usd": cost, "logprobs": json.dumps(call_content(q))}
                handle.write(json.dumps(record) + "\n")
    return path


def invoke(*args: str | Path) -> Any:
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """Only the calibrate command."""

    register(app)
    return CliRunner().invoke(app, ["calibrate", *map(str, args)])


def test_runs_are_scored_on_the_calls_decisions(runs: Path) -> None:
    matrix = load_runs(runs, scorer="min_probability", top_k=5, score_tokens="call_values")
    expected = [score_logprobs(call_content(q), "min_probability", 5, "call_values") for q in range(6)]
    assert matrix.score[:, 0].tolist() == pytest.approx(expected)
    whole = load_runs(runs, scorer="min_probability", top_k=5)
    # The whole answer's least likely token is formatting ('{\n'), the same in every row at first.
    assert whole.score[0, 0] == whole.score[1, 0] and matrix.score[0, 0] > matrix.score[1, 0]
    assert (matrix.score_tokens, whole.score_tokens) == ("call_values", "all")


def test_the_cli_writes_the_option_into_the_policys_scorer(runs: Path, tmp_path: Path) -> None:
    tiers = tmp_path / "tiers.yaml"
    tiers.write_text("default_tier: t\ntiers:\n  t: {max_cost_usd: 0.0065}\n")
    output = tmp_path / "policy.json"
    args = ["--scorer", "min_probability", "--top-k", "5", "--tiers", tiers, "-o", output]
    result = invoke(runs, *args, "--score-tokens", "call_values")
    assert result.exit_code == 0, result.output
    assert "tokens=call_values" in result.output
    policy = load_policy(output)
    assert (policy.scorer.name, policy.scorer.top_k, policy.scorer.tokens) == (
        "min_probability",
        5,
        "call_values",
    )
    # The small model is accepted exactly on the right answers (q < 3): only the values say so.
    (route,) = policy.tiers["t"].routes
    assert route.models == ["small", "large"]
    accepted = [
        score_logprobs(call_content(q), "min_probability", 5, "call_values") >= route.thresholds[0]
        for q in range(6)
    ]
    assert accepted == [True, True, True, False, False, False]
    assert invoke(runs, *args).exit_code == 0
    assert load_policy(output).scorer.tokens == "all"


def test_an_unknown_value_or_a_score_column_with_it_is_one_line(runs: Path, tmp_path: Path) -> None:
    tiers = tmp_path / "tiers.yaml"
    tiers.write_text("default_tier: t\ntiers:\n  t: {max_cost_usd: 0.0065}\n")
    for extra, message in (
        (["--score-tokens", "values"], "unknown score tokens 'values'"),
        (["--score-tokens", "call_values", "--score-column", "x"], "cannot be combined"),
    ):
        result = invoke(runs, "--tiers", tiers, "-o", tmp_path / "p.json", *extra)
        assert result.exit_code == 1 and message in result.output, result.output
        assert result.output.strip().startswith("error:") and "Traceback" not in result.output
    with pytest.raises(RunsError, match="call_values"):
        load_runs(runs, score_tokens="names")
