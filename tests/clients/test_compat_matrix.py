"""docs/compatibility.md is generated from the tests' compat markers and kept current."""

from __future__ import annotations

import subprocess
import sys

import pytest
from compat_matrix import CLIENTS, FEATURES, Proof, _proof, render

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
    assert "works (1 test), refused: web_search tools are not served" in row
    assert "- tools: refused (web_search tools are not served): `tests/a.py::test_web_search`" in text
    assert "- tools: works: `tests/a.py::test_tool`" in text


@pytest.mark.parametrize(
    ("client", "feature", "refused"),
    [("curl", "text", None), ("codex", "vision", None), ("codex", "text", " ")],
)
def test_a_marker_outside_the_matrix_is_an_error(client: str, feature: str, refused: str | None) -> None:
    with pytest.raises(ValueError):
        _proof("tests/a.py::t", client, feature, refused)
