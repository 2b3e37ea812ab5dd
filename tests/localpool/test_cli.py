"""`cascade models` / `cascade demo` error paths: one red line, non-zero exit, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cascade_cli.main import app


@pytest.fixture
def empty_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "pool"))
    monkeypatch.delenv("CASCADE_RUN_DIR", raising=False)
    return tmp_path / "pool"


def test_up_without_installed_models_says_how_to_install(empty_home: Path) -> None:
    result = CliRunner().invoke(app, ["models", "up", "smollm2-135m"])
    assert result.exit_code == 1
    assert "error: " in result.output and "cascade models install" in result.output
    assert "Traceback" not in result.output


def test_unknown_model_name_is_rejected(empty_home: Path) -> None:
    result = CliRunner().invoke(app, ["models", "up", "gpt-9"])
    assert result.exit_code == 1
    assert "error: unknown model gpt-9" in result.output


def test_status_lists_every_model_of_the_pool(empty_home: Path) -> None:
    result = CliRunner().invoke(app, ["models", "status"])
    assert result.exit_code == 0, result.output
    for name in ("smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        assert name in result.output


def test_down_with_nothing_running_is_fine(empty_home: Path) -> None:
    result = CliRunner().invoke(app, ["models", "down"])
    assert result.exit_code == 0
    assert "smollm2-135m: not running" in result.output


def test_demo_refuses_a_policy_naming_models_outside_the_pool(empty_home: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"models": {"gpt-9": {}}, "tiers": {"balanced": {}}}))
    result = CliRunner().invoke(app, ["demo", "--smoke", "--policy", str(policy)])
    assert result.exit_code == 1
    assert "unknown model gpt-9" in result.output and "Traceback" not in result.output
