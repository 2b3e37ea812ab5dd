"""List the functions and methods longer than a threshold (60 lines by default) in the packages.

Usage: ``python scripts/long_functions.py [--max-lines N] [--root DIR] [DIRECTORY ...]`` (default:
every package pyproject.toml installs; add ``bench scripts tests`` for the whole repository). A
function's length runs from its first decorator (or its ``def``) to its last line, docstring
included; nested functions are counted on their own as well as inside their parent. Prints one line
per long function (its qualified name: ``Class.method``, ``outer.inner``), longest first, then the
total. tests/test_long_functions.py holds the packages to an allowlist of the functions over 60 lines.
"""

from __future__ import annotations

import argparse
import ast
import tomllib
from pathlib import Path


def project_packages(root: Path) -> tuple[str, ...]:
    """The top-level packages pyproject.toml installs (``[tool.setuptools.packages.find]``)."""
    document = tomllib.loads((root / "pyproject.toml").read_text())
    patterns = document["tool"]["setuptools"]["packages"]["find"]["include"]
    return tuple(sorted({pattern.rstrip("*").split(".")[0] for pattern in patterns}))


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function under ``tree`` with its qualified name (``Class.method``, ``outer.inner``)."""
    found: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{node.name}"
            if not isinstance(node, ast.ClassDef):
                found.append((name, node))
            found.extend(_functions(node, f"{name}."))
        else:
            found.extend(_functions(node, prefix))
    return found


def long_functions(root: Path, packages: tuple[str, ...], max_lines: int) -> list[tuple[int, str]]:
    """Return (length, "path:line qualname") for every function in the packages longer than max_lines."""
    found: list[tuple[int, str]] = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for qualname, node in _functions(tree):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                length = (node.end_lineno or node.lineno) - first + 1
                if length > max_lines:
                    where = f"{path.relative_to(root)}:{node.lineno}"
                    found.append((length, f"{where} {qualname}"))
    return sorted(found, reverse=True)


def main() -> None:
    """Print the long functions and their count."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packages", nargs="*")
    parser.add_argument("--max-lines", type=int, default=60)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    found = long_functions(args.root, tuple(args.packages) or project_packages(args.root), args.max_lines)
    for length, where in found:
        print(f"{length:5d}  {where}")
    print(f"{len(found)} functions over {args.max_lines} lines")


if __name__ == "__main__":
    main()
