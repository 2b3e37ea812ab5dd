"""No package function grows past 60 lines unless it is on the allowlist, and the allowlist only shrinks.

scripts/long_functions.py measures (a function from its first decorator to its last line, nested
ones counted on their own); this test runs it over every package pyproject.toml installs.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "long_functions.py"
_spec = importlib.util.spec_from_file_location("long_functions", SCRIPT)
assert _spec is not None and _spec.loader is not None
long_functions_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(long_functions_script)

MAX_LINES = 60
# The package functions (qualified names) allowed over MAX_LINES today. This list may only shrink:
# a function shortened to MAX_LINES or less is taken off it (the test below says so), and no name
# is ever added.
ALLOWED: set[str] = set()


def over_the_limit(root: Path = REPO_ROOT) -> dict[str, str]:
    """Qualified name -> "length path:line" of every package function over MAX_LINES lines."""
    packages = long_functions_script.project_packages(root)
    found = long_functions_script.long_functions(root, packages, MAX_LINES)
    return {where.split(" ", 1)[1]: f"{length} {where.split(' ', 1)[0]}" for length, where in found}


def test_no_package_function_over_60_lines_but_the_allowed_ones() -> None:
    new = {name: where for name, where in over_the_limit().items() if name not in ALLOWED}
    assert not new, f"functions over {MAX_LINES} lines (shorten them; the allowlist only shrinks): {new}"


def test_the_allowlist_names_only_functions_still_over_60_lines() -> None:
    shortened = ALLOWED - set(over_the_limit())
    assert not shortened, f"no longer over {MAX_LINES} lines: take them off ALLOWED: {sorted(shortened)}"


def test_the_measure_counts_decorators_and_names_functions_by_where_they_are(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.setuptools.packages.find]\ninclude = ["pkg*"]\n')
    (tmp_path / "pkg").mkdir()

    def body(indent: str, lines: int = MAX_LINES - 1) -> str:
        return "\n".join(f"{indent}x = {i}" for i in range(lines))

    (tmp_path / "pkg" / "m.py").write_text(
        "class C:\n"
        "    @staticmethod\n"  # line 2: counted, so this method is MAX_LINES + 1 lines long
        f"    def long() -> None:\n{body(' ' * 8)}\n"
        f"    def exactly_the_limit() -> None:\n{body(' ' * 8)}\n"
        "def outer() -> None:\n"
        f"    def inner() -> None:\n{body(' ' * 8, MAX_LINES)}\n"
        "    inner()\n"
    )
    outer_line = 3 + 2 * MAX_LINES
    assert over_the_limit(tmp_path) == {
        "C.long": f"{MAX_LINES + 1} pkg/m.py:3",
        "outer": f"{MAX_LINES + 3} pkg/m.py:{outer_line}",
        "outer.inner": f"{MAX_LINES + 1} pkg/m.py:{outer_line + 1}",
    }
