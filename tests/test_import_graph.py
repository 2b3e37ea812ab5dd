"""Imports run one way: every import between top-level packages goes to a lower floor, and no module
imports itself back through others (no cycle between packages, none inside one). Inside a package
with a folder table (``FOLDER_FLOORS``), its folders are floors too: a folder imports only folders
on a lower floor, the package's top-level modules counting as one unit (``TOP_LEVEL``).

The floors are listed here and in docs/architecture.md (checked to agree). Every import counts,
including the ones inside functions and under ``TYPE_CHECKING``: a lazy import is still a dependency.
A new top-level package (pyproject.toml ``packages.find``) must be given a floor, and a new folder
of a package with a folder table a floor in that table.

Run as a script on any checkout to print its counts: ``python tests/test_import_graph.py [ROOT]``
(cycles between packages, cycles between modules of one package, imports that do not run down;
per folder table, cycles between folders and imports between folders that do not run down).
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Floor of each top-level package: a package imports only packages on a lower floor.
FLOORS: dict[str, int] = {
    "money": 0,
    "stats": 0,
    "redaction": 0,
    "graders": 0,
    "cli_failure": 0,
    "policies": 1,
    "traffic": 2,
    "localpool": 2,
    "publishing": 2,
    "gateway": 3,
    "calibration": 3,
    "collection": 4,
    "replay": 5,
    "cascade_cli": 6,
}

# The top-level modules of a package (and its ``__init__``), as one unit of its folder table.
TOP_LEVEL = "(top level)"

# Floor of each folder inside calibration/: a folder imports only folders on a lower floor.
CALIBRATION_FLOORS: dict[str, int] = {
    TOP_LEVEL: 0,
    "routing": 1,
    "evaluation": 2,
    "policy": 2,
    "reporting": 3,
    "recalibration": 3,
    "commands": 4,
}

# The packages whose folders are floors, each with its table.
# Floor of each room (folder) inside gateway/; no module lives at its top level but its __init__.
GATEWAY_FLOORS: dict[str, int] = {
    TOP_LEVEL: 0,
    "wire": 0,
    "redis": 0,
    "config": 1,
    "telemetry": 2,
    "upstream": 3,
    "keys": 3,
    "routing": 3,
    "stages": 4,
    "streaming": 5,
    "engine": 6,
    "learning": 7,
    "records": 7,
    "assembly": 8,
    "console": 9,
    "api": 10,
    "commands": 11,
}

FOLDER_FLOORS: dict[str, dict[str, int]] = {
    "calibration": CALIBRATION_FLOORS,
    "gateway": GATEWAY_FLOORS,
}

Graph = dict[str, set[str]]


def project_packages(root: Path) -> list[str]:
    """Top-level packages installed from ``root`` (pyproject.toml ``[tool.setuptools.packages.find]``)."""
    document = tomllib.loads((root / "pyproject.toml").read_text())
    patterns = document["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted({pattern.rstrip("*").split(".")[0] for pattern in patterns})


def _modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``packages`` under ``root``."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported_names(tree: ast.Module, module: str, is_package: bool) -> Iterable[str]:
    """Every dotted name an ``import`` or ``from ... import`` in the tree may refer to."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            yield source
            # `from package import module` imports the module.
            yield from (f"{source}.{alias.name}" for alias in node.names)


def module_imports(root: Path, packages: Iterable[str]) -> Graph:
    """Module -> the project modules it imports (anywhere in its body), for ``packages`` under ``root``."""
    packages = list(packages)
    modules = _modules(root, packages)

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: Graph = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        names = _imported_names(tree, module, path.name == "__init__.py")
        targets = {resolve(name) for name in names if name.split(".")[0] in packages}
        graph[module] = {target for target in targets if target and target != module}
    return graph


def package_graph(imports: Mapping[str, set[str]]) -> Graph:
    """Top-level package -> the other top-level packages its modules import."""
    graph: Graph = {}
    for module, targets in imports.items():
        top = module.split(".")[0]
        graph.setdefault(top, set()).update(t.split(".")[0] for t in targets if t.split(".")[0] != top)
    return graph


def imports_not_down(imports: Mapping[str, set[str]], floors: Mapping[str, int]) -> list[str]:
    """``importer -> imported`` for every import into another package that is not on a lower floor."""
    found = []
    for module, targets in sorted(imports.items()):
        top = module.split(".")[0]
        for target in sorted(targets):
            other = target.split(".")[0]
            if other != top and floors[other] >= floors[top]:
                found.append(f"{module} (floor {floors[top]}) -> {target} (floor {floors[other]})")
    return found


def strongly_connected(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The groups of two or more nodes that reach each other (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for node in sorted(graph):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(groups)


def elementary_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Every simple cycle, each started at its smallest node (for counting; the graphs are small)."""
    cycles: list[list[str]] = []

    def walk(start: str, node: str, path: list[str]) -> None:
        for other in sorted(graph.get(node, ())):
            if other == start:
                cycles.append([*path])
            elif other > start and other not in path:
                walk(start, other, [*path, other])

    for start in sorted(graph):
        walk(start, start, [start])
    return cycles


def in_package_graph(imports: Mapping[str, set[str]]) -> Graph:
    """The module graph with only the imports between modules of the same top-level package."""
    return {
        module: {t for t in targets if t.split(".")[0] == module.split(".")[0]}
        for module, targets in imports.items()
    }


def folder_of(module: str, package: str, folders: Iterable[str]) -> str | None:
    """The unit of ``package`` that ``module`` belongs to: its first folder under the package (one of
    ``folders``), ``TOP_LEVEL`` for the package itself and its top-level modules, None outside it."""
    parts = module.split(".")
    if parts[0] != package:
        return None
    if len(parts) > 1 and parts[1] in folders:
        return parts[1]
    return TOP_LEVEL


def package_folders(imports: Mapping[str, set[str]], package: str) -> set[str]:
    """The folders (sub-packages) of ``package`` that hold a module below their ``__init__``."""
    return {m.split(".")[1] for m in imports if m.startswith(f"{package}.") and m.count(".") >= 2}


def folder_graph(imports: Mapping[str, set[str]], package: str) -> Graph:
    """Unit of ``package`` (``folder_of``) -> the other units of it that its modules import."""
    folders = package_folders(imports, package)
    graph: Graph = {}
    for module, targets in imports.items():
        unit = folder_of(module, package, folders)
        if unit is None:
            continue
        found = {folder_of(target, package, folders) for target in targets}
        graph.setdefault(unit, set()).update(other for other in found if other not in (None, unit))
    return graph


def folder_imports_not_down(
    imports: Mapping[str, set[str]], package: str, floors: Mapping[str, int]
) -> list[str]:
    """``importer -> imported`` for every import between two units of ``package`` (``folder_of``)
    whose target is not on a lower floor of ``floors``."""
    folders = package_folders(imports, package)
    found = []
    for module, targets in sorted(imports.items()):
        unit = folder_of(module, package, folders)
        if unit is None:
            continue
        for target in sorted(targets):
            other = folder_of(target, package, folders)
            if other is not None and other != unit and floors[other] >= floors[unit]:
                found.append(
                    f"{module} ({unit}, floor {floors[unit]}) -> {target} ({other}, floor {floors[other]})"
                )
    return found


@pytest.fixture(scope="module")
def imports() -> Graph:
    return module_imports(REPO, project_packages(REPO))


def test_every_package_has_a_floor() -> None:
    assert sorted(FLOORS) == project_packages(REPO), "give a new top-level package a floor in FLOORS"


def test_every_import_between_packages_runs_down(imports: Graph) -> None:
    assert imports_not_down(imports, FLOORS) == []


def test_no_cycle_between_packages(imports: Graph) -> None:
    assert strongly_connected(package_graph(imports)) == []


def test_no_cycle_between_the_modules_of_a_package(imports: Graph) -> None:
    assert strongly_connected(in_package_graph(imports)) == []


def _write_files(root: Path, files: Mapping[str, str]) -> None:
    """Write each ``path: text`` of ``files`` under ``root`` (a small package tree for the checks)."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_the_checks_find_an_upward_import_and_the_cycles_it_makes(tmp_path: Path) -> None:
    # low.base imports high.top (upward), which imports low.base; low.a <-> low.b inside one package.
    files = {
        "low/__init__.py": "",
        "low/base.py": "def f():\n    from high.top import g\n",
        "low/a.py": "from low import b\n",
        "low/b.py": "from . import a\n",
        "high/__init__.py": "",
        "high/top.py": "import low.base\n",
    }
    _write_files(tmp_path, files)
    found = module_imports(tmp_path, ["low", "high"])
    assert imports_not_down(found, {"low": 0, "high": 1}) == ["low.base (floor 0) -> high.top (floor 1)"]
    assert strongly_connected(package_graph(found)) == [["high", "low"]]
    assert strongly_connected(in_package_graph(found)) == [["low.a", "low.b"]]
    assert elementary_cycles(in_package_graph(found)) == [["low.a", "low.b"]]


@pytest.mark.parametrize("package", sorted(FOLDER_FLOORS))
def test_every_folder_of_a_package_has_a_floor(imports: Graph, package: str) -> None:
    units = {TOP_LEVEL, *package_folders(imports, package)}
    assert sorted(FOLDER_FLOORS[package]) == sorted(units), f"give a new folder of {package}/ a floor"


@pytest.mark.parametrize("package", sorted(FOLDER_FLOORS))
def test_every_import_between_folders_runs_down(imports: Graph, package: str) -> None:
    assert folder_imports_not_down(imports, package, FOLDER_FLOORS[package]) == []


@pytest.mark.parametrize("package", sorted(FOLDER_FLOORS))
def test_no_cycle_between_the_folders_of_a_package(imports: Graph, package: str) -> None:
    assert strongly_connected(folder_graph(imports, package)) == []


def test_the_folder_checks_find_an_upward_import_and_the_cycle_it_makes(tmp_path: Path) -> None:
    # pkg.low.a imports pkg.high.b (upward), which imports pkg.base; pkg.base imports pkg.low.a.
    files = {
        "pkg/__init__.py": "",
        "pkg/base.py": "import pkg.low.a\n",
        "pkg/low/__init__.py": "",
        "pkg/low/a.py": "def f():\n    from pkg.high.b import g\n",
        "pkg/high/__init__.py": "",
        "pkg/high/b.py": "from pkg import base\nimport money\n",
        "money/__init__.py": "",
    }
    _write_files(tmp_path, files)
    found = module_imports(tmp_path, ["pkg", "money"])
    floors = {TOP_LEVEL: 0, "low": 1, "high": 2}
    assert folder_graph(found, "pkg") == {TOP_LEVEL: {"low"}, "low": {"high"}, "high": {TOP_LEVEL}}
    assert folder_imports_not_down(found, "pkg", floors) == [
        "pkg.base ((top level), floor 0) -> pkg.low.a (low, floor 1)",
        "pkg.low.a (low, floor 1) -> pkg.high.b (high, floor 2)",
    ]
    assert strongly_connected(folder_graph(found, "pkg")) == [sorted([TOP_LEVEL, "high", "low"])]


def _doc_floors(text: str, heading: str) -> dict[str, int]:
    """``name -> floor`` of the table under the first ``## `` heading holding ``heading`` in
    docs/architecture.md: rows ``| floor | names in backquotes | ...``, a folder written ``name/``."""
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    listed: dict[str, int] = {}
    for floor, names in re.findall(r"^\| (\d+) \| ([^|]+) \|", section, flags=re.M):
        for name in re.findall(r"`([^`]+)`", names):
            listed[name.rstrip("/")] = int(floor)
    return listed


@pytest.mark.parametrize("package", sorted(FOLDER_FLOORS))
def test_the_architecture_doc_lists_the_same_folder_floors(package: str) -> None:
    text = (REPO / "docs" / "architecture.md").read_text()
    assert _doc_floors(text, f"## Floors inside `{package}/`") == FOLDER_FLOORS[package]


def test_the_architecture_doc_lists_the_same_floors() -> None:
    text = (REPO / "docs" / "architecture.md").read_text()
    assert _doc_floors(text, "## Floors\n") == FLOORS


def _report(root: Path, floors: Mapping[str, int]) -> None:
    """Print the counts of a checkout (floors of packages it lacks are ignored)."""
    packages = [p for p in project_packages(root) if (root / p).is_dir()]
    found = module_imports(root, packages)
    between = elementary_cycles(package_graph(found))
    inside = elementary_cycles(in_package_graph(found))
    upward = imports_not_down(found, floors)
    for group in strongly_connected(package_graph(found)):
        print(f"packages that all reach each other: {len(group)} of {len(packages)}: {', '.join(group)}")
    print(f"cycles between packages: {len(between)}")
    for cycle in between:
        print("  " + " -> ".join([*cycle, cycle[0]]))
    print(f"cycles between modules of one package: {len(inside)}")
    for cycle in inside:
        print("  " + " -> ".join([*cycle, cycle[0]]))
    print(f"imports that do not run down: {len(upward)}")
    for line in upward:
        print("  " + line)
    for package, folder_floors in FOLDER_FLOORS.items():
        if package in packages:
            _report_folders(found, package, folder_floors)


def _report_folders(found: Graph, package: str, floors: Mapping[str, int]) -> None:
    """Print the folder counts of one package (folders its table lacks: floor 0 of their own)."""
    graph = folder_graph(found, package)
    known = {unit: floors.get(unit, 0) for unit in {*graph, *(u for t in graph.values() for u in t)}}
    edges = sorted((a, b) for a, targets in graph.items() for b in targets if known[b] >= known[a])
    cycles = elementary_cycles(graph)
    upward = folder_imports_not_down(found, package, known)
    print(f"{package}/: cycles between folders: {len(cycles)}")
    for cycle in cycles:
        print("  " + " -> ".join([*cycle, cycle[0]]))
    print(f"{package}/: folder -> folder edges that do not run down: {len(edges)}")
    for a, b in edges:
        print(f"  {a} (floor {known[a]}) -> {b} (floor {known[b]})")
    print(f"{package}/: imports between folders that do not run down: {len(upward)}")
    for line in upward:
        print("  " + line)


if __name__ == "__main__":
    _report(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO, FLOORS)


def test_gateway_modules_live_in_rooms() -> None:
    top_level = sorted(p.name for p in (REPO / "gateway").glob("*.py"))
    assert top_level == ["__init__.py"]


def test_no_level_of_gateway_holds_more_than_twenty_modules() -> None:
    for folder in [REPO / "gateway", *(p.parent for p in (REPO / "gateway").rglob("__init__.py"))]:
        entries = [
            p
            for p in folder.iterdir()
            if p.name != "__init__.py" and (p.suffix == ".py" or (p / "__init__.py").exists())
        ]
        assert len(entries) <= 20, f"{folder}: {len(entries)} modules and folders"
