"""``cascade calibrate`` as the calibration tests run it, and a runs file of recorded logprobs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner, Result

from calibration.commands.calibrate_cli import register
from tests.support.data_files import UPSTREAM_ANSWERS


def calibrate_app() -> typer.Typer:
    """A CLI with only the calibrate command, so other packages' commands are not imported here."""
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """Only the calibrate command."""

    register(app)
    return app


def calibrate(*args: str | Path) -> Result:
    """``cascade calibrate ARGS`` (each argument as text)."""
    return CliRunner().invoke(calibrate_app(), ["calibrate", *map(str, args)])


def calibrate_with_tiers(tmp_path: Path, tiers_yaml: str, *args: str | Path) -> Result:
    """``cascade calibrate ARGS --tiers T -o tmp_path/policy.json``, T the file ``tiers_yaml`` is
    written to (tmp_path/tiers.yaml)."""
    tiers = tmp_path / "tiers.yaml"
    tiers.write_text(tiers_yaml)
    return calibrate(*args, "--tiers", tiers, "-o", tmp_path / "policy.json")


# One tier whose budget ($0.005) affords small then large on the runs of ``write_logprob_runs``.
LOGPROB_RUNS_TIERS = "default_tier: t\ntiers:\n  t: {max_cost_usd: 0.005}\n"


def write_logprob_runs(path: Path, queries: int, step: float) -> list[dict[str, Any]]:
    """Runs of ``small`` ($0.001, right on odd queries) and ``large`` ($0.01, always right) on
    ``queries`` questions, as JSONL at ``path``; every answer carries the recorded Qwen top-20
    logprobs, each lowered by ``step`` per query index (the confidence falls query by query).
    Returns the rows written."""
    content = json.loads((UPSTREAM_ANSWERS / "native_qwen_top20.json").read_text())
    content = content["choices"][0]["logprobs"]["content"]
    rows = []
    for q in range(queries):
        for model, cost in (("small", 0.001), ("large", 0.01)):
            entry = [dict(e, logprob=e["logprob"] - step * q) for e in content]
            rows.append(
                {
                    "query_id": q,
                    "model": model,
                    "correct": int(model == "large" or q % 2),
                    "cost_usd": cost,
                    "logprobs": json.dumps(entry),
                }
            )
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return rows
