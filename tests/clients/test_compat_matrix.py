"""docs/compatibility.md is generated from the tests' compat markers and kept current."""

from __future__ import annotations

import subprocess
import sys

import pytest
from compat_matrix import CLIENTS, FEATURES, LOCAL, SCRIPTED, Proof, _proof, collect, render

SCRIPT = "tests/clients/compat_matrix.py"


def test_docs_compatibility_matches_the_markers(repo_root) -> None:
    result = subprocess.run(
        [sys.executable, SCRIPT, "--check"], cwd=repo_root, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_every_client_and_feature_has_a_cell() -> None:
    text = render([], {client: "x==1" for client in CLIENTS})
    rows = [line for line in text.splitlines() if line.startswith("| ") and "not tested" in line]
    assert [row.split(" | ")[0][2:] for row in rows] == list(CLIENTS)
    assert all(row.count("not tested") == len(FEATURES) for row in rows)


def test_a_cell_shows_works_and_refusals_with_their_tests() -> None:
    proofs = [
        Proof("codex", "tools", "tests/a.py::test_tool"),
        Proof("codex", "tools", "tests/a.py::test_web_search", refused="web_search tools are not served"),
    ]
    text = render(proofs, {client: "x==1" for client in CLIENTS})
    row = next(line for line in text.splitlines() if line.startswith("| codex |"))
    assert "works (scripted: 1), refused: web_search tools are not served" in row
    assert (
        "- tools: refused (web_search tools are not served), scripted: `tests/a.py::test_web_search`" in text
    )
    assert "- tools: works, scripted: `tests/a.py::test_tool`" in text


def test_a_cell_says_which_tests_ran_on_the_local_models() -> None:
    proofs = [
        Proof("claude-code", "text", "tests/a.py::test_scripted"),
        Proof("claude-code", "text", "tests/a.py::test_other_scripted"),
        Proof("claude-code", "text", "tests/b.py::test_real", against=LOCAL),
    ]
    text = render(proofs, {client: "x==1" for client in CLIENTS})
    row = next(line for line in text.splitlines() if line.startswith("| claude-code |"))
    assert row.split(" | ")[1] == "works (local models: 1, scripted: 2)"
    assert "- text: works, local models: `tests/b.py::test_real`" in text


def test_a_client_run_other_than_as_installed_says_how_in_its_cell() -> None:
    proofs = [
        Proof("claude-code", "text", "tests/a.py::test_scripted"),
        Proof("claude-code", "text", "tests/b.py::test_real", against=LOCAL, settings="with `--tools Bash`"),
    ]
    text = render(proofs, {client: "x==1" for client in CLIENTS})
    row = next(line for line in text.splitlines() if line.startswith("| claude-code |"))
    assert row.split(" | ")[1] == "works (local models: 1, scripted: 1), local models: with `--tools Bash`"
    assert "- text: works, local models (with `--tools Bash`): `tests/b.py::test_real`" in text


def test_e2e_tests_are_collected_as_run_on_the_local_models(tmp_path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    markers = '["e2e: real models", "compat(client, feature, refused=None): cell"]'
    options = f'markers = {markers}\nasyncio_default_fixture_loop_scope = "function"\n'
    (tmp_path / "pyproject.toml").write_text(f"[tool.pytest.ini_options]\n{options}")
    cell = "@pytest.mark.compat(client='codex', feature='text')\n"
    (tests / "test_x.py").write_text(
        f"import pytest\n\n@pytest.mark.e2e\n{cell}def test_real():\n    pass\n\n"
        f"{cell}def test_scripted():\n    pass\n"
    )
    against = {proof.nodeid.rsplit("::", 1)[1]: proof.against for proof in collect(tmp_path)}
    assert against == {"test_real": LOCAL, "test_scripted": SCRIPTED}


@pytest.mark.parametrize(
    ("client", "feature", "refused"),
    [("curl", "text", None), ("codex", "vision", None), ("codex", "text", " ")],
)
def test_a_marker_outside_the_matrix_is_an_error(client: str, feature: str, refused: str | None) -> None:
    with pytest.raises(ValueError):
        _proof("tests/a.py::t", client, feature, refused)
