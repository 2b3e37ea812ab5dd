"""docs/request-path.md names, for each step of a request, the modules and the functions that do it:
every function or ``Class.method`` of a step's row is defined in one of that row's modules, so a step
that moves fails here instead of leaving the page behind."""

from __future__ import annotations

import ast
import re
from pathlib import Path

_NAME = re.compile(r"`([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)?)`")
_PACKAGES = "gateway|policies|money|stats|redaction|publishing|traffic|calibration"
_MODULE = re.compile(rf"`((?:{_PACKAGES})/[\w/]+\.py)`")


def _definitions(path: Path) -> set[str]:
    """``name`` for every function and class of the module, ``Class.name`` for their members."""
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                    found.add(f"{node.name}.{member.name}")
    return found


def test_every_function_of_a_step_is_defined_in_its_modules(repo_root: Path) -> None:
    text = (repo_root / "docs" / "request-path.md").read_text()
    rows = [line for line in text.splitlines() if re.match(r"\| \d+[a-z]? \|", line)]
    assert len(rows) >= 15
    steps = [row.split(" | ")[0].strip("| ") for row in rows]
    assert len(steps) == len(set(steps)), "a step is listed twice"
    for row in rows:
        cells = row.split(" | ")
        modules, functions = cells[2], cells[3]
        defined: set[str] = set()
        for module in _MODULE.findall(modules):
            defined |= _definitions(repo_root / module)
        missing = [name for name in _NAME.findall(functions) if name not in defined]
        assert missing == [], f"step {cells[0].strip('| ')}: {missing} not in {_MODULE.findall(modules)}"
