"""Every test that starts a real model, an agent CLI or the container image carries the marker that
`bash scripts/test.sh --fast` leaves out (``-m 'not e2e and not agent_cli and not image'``).

What a test starts is read from the source: the test function's own and, through its parameters,
the fixtures it uses (the module's, its directories' conftests' and the plugins' in tests/support/,
the nearest definition of a name winning, as pytest resolves it), followed to the end. A source that
starts something matches one of ``STARTERS``. The tests found are then collected as pytest sees
them (markers added at collection included, e.g. ``local_pool``'s ``e2e``) and each must carry the
marker of what it starts. So a new module that starts llama-server unmarked fails here, not by
slowing the fast tier down.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO_ROOT

TESTS = REPO_ROOT / "tests"
# What a source that starts something says, by the marker its tests need.
STARTERS: dict[str, list[re.Pattern[str]]] = {
    "e2e": [
        re.compile(r"\brunning_demo\("),  # the demo's gateway on the real pool (tests/support/local_demo.py)
        re.compile(r"cascade demo --|\"cascade_cli\.main\",\s*\"demo\""),  # `cascade demo` in a subprocess
        re.compile(r"\bup\(\s*manifest\b"),  # localpool.pool.up: the pool's servers
        # the installed llama-server binary, started
        re.compile(
            r"llama_server_binary\(\)[\s\S]*\b(smoke_test|emulated_smoke_test|start_detached|server_command)\("
        ),
    ],
    "agent_cli": [re.compile(r"\b(run_codex|run_claude)\(|\bcli\(\"(codex|claude)\"\)")],
    "image": [re.compile(r"\bpodman\b")],
}
# Modules whose sources match a starter without starting it, and why.
NOT_STARTING = {
    # pool.up on a fake llama-server binary (the seam ``require_installed`` is patched)
    "tests/localpool/test_server_death.py": {"e2e"},
}
FAST = re.compile(r'selection=\(-m "([^"]+)"\)')


@functools.cache
def _functions(path: Path) -> dict[str, tuple[str, list[str]]]:
    """Every function of a module: name -> (its source, the names it may reach: its parameters, which
    may be fixtures, and the functions it calls, which may be the module's helpers)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = {}
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            parameters = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
            calls = [
                call.func.id
                for call in ast.walk(node)
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            ]
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            source = "\n".join(lines[first - 1 : node.end_lineno])
            found[node.name] = (source, parameters + calls)
    return found


@functools.cache
def _fixtures(path: Path) -> dict[str, tuple[str, list[str]]]:
    """The fixtures of a module (functions decorated with ``pytest.fixture``)."""
    return {name: value for name, value in _functions(path).items() if "fixture" in value[0].split("def ")[0]}


def _visible(module: Path) -> dict[str, tuple[str, list[str]]]:
    """The fixtures a test module sees (plugins, then conftests from the top down, then its own), and
    its own functions (the helpers its tests call)."""
    visible: dict[str, tuple[str, list[str]]] = {}
    for plugin in sorted((TESTS / "support").glob("*.py")):
        visible |= _fixtures(plugin)
    directory = module.parent
    conftests = [d / "conftest.py" for d in (directory, *directory.parents) if d.is_relative_to(TESTS)]
    for conftest in reversed(conftests):
        if conftest.is_file():
            visible |= _fixtures(conftest)
    return visible | _functions(module)


def _starts(source: str, parameters: list[str], reachable: dict[str, tuple[str, list[str]]]) -> set[str]:
    """The markers a function needs: its own source's starters and those of the fixtures and helpers it
    reaches, followed to the end."""
    needed: set[str] = set()
    seen: set[str] = set()
    pending = [(source, parameters)]
    while pending:
        text, names = pending.pop()
        needed |= {marker for marker, patterns in STARTERS.items() if any(p.search(text) for p in patterns)}
        # the session's real pool (tests/support/local_pool.py) and the demo on it, as fixtures
        needed |= {"e2e" for name in names if name in ("local_pool", "local_demo")}
        for name in names:
            if name in reachable and name not in seen:
                seen.add(name)
                pending.append(reachable[name])
    return needed


def starting_tests() -> dict[tuple[str, str], set[str]]:
    """(module path relative to the repository, test function name) -> the markers it needs."""
    found = {}
    for module in sorted(TESTS.rglob("test_*.py")):
        if "node_modules" in module.parts or module == Path(__file__):  # (this scan's patterns)
            continue
        reachable = _visible(module)
        relative = module.relative_to(REPO_ROOT).as_posix()
        for name, (source, parameters) in _functions(module).items():
            if name.startswith("test_"):
                needed = _starts(source, parameters, reachable) - NOT_STARTING.get(relative, set())
                if needed:
                    found[(relative, name)] = needed
    return found


def collected_markers(modules: list[str], report: Path) -> Iterator[tuple[str, str, set[str]]]:
    """Collect ``modules`` as pytest does: (module, test function name, its markers) per test."""
    env = {**os.environ, "CASCADE_MARKER_REPORT": str(report)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "tests.support.marker_report",
            *modules,
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for nodeid, markers in json.loads(report.read_text(encoding="utf-8")).items():
        module, *_, function = nodeid.split("::")
        yield module, function.split("[")[0], set(markers)


def test_the_fast_tier_leaves_out_every_marker_a_test_can_need() -> None:
    """scripts/test.sh --fast deselects each marker of ``STARTERS`` (and nothing else)."""
    (expression,) = FAST.findall((REPO_ROOT / "scripts" / "test.sh").read_text())
    assert expression == " and ".join(f"not {marker}" for marker in STARTERS)


def test_the_scan_finds_what_is_known_to_start_servers_and_clients() -> None:
    """The scan is not blind: the modules known to start each kind are found."""
    found = starting_tests()
    modules: dict[str, set[str]] = {}
    for (module, _), needed in found.items():
        modules.setdefault(module, set()).update(needed)
    e2e_modules = {p.relative_to(REPO_ROOT).as_posix() for p in (TESTS / "e2e").glob("test_*.py")}
    model_free = {"tests/e2e/test_learning_e2e_support.py"}  # unit tests of a support module
    for module in e2e_modules - model_free:
        assert "e2e" in modules.get(module, set()), module
    assert model_free.isdisjoint(modules)
    assert modules["tests/clients/test_codex_local.py"] == {"e2e", "agent_cli"}
    assert modules["tests/clients/test_claude_code.py"] == {"agent_cli"}
    assert modules["tests/deploy/test_image.py"] == {"image"}
    # Only the smoke tests of the build start it (natively, emulated); the others use a fake binary.
    assert [f for m, f in found if m == "tests/localpool/test_server_build.py"] == [
        "test_the_installed_build_passes_its_smoke_test_on_this_cpu",
        "test_the_installed_native_build_fails_the_emulated_older_cpu_smoke_in_one_line",
    ]


def test_every_test_that_starts_a_model_a_cli_or_the_image_is_marked(tmp_path: Path) -> None:
    found = starting_tests()
    modules = sorted({module for module, _ in found})
    unmarked = []
    seen = set()
    for module, function, markers in collected_markers(modules, tmp_path / "markers.json"):
        needed = found.get((module, function))
        if needed is None:
            continue
        seen.add((module, function))
        if not needed <= markers:
            unmarked.append(f"{module}::{function} needs {sorted(needed - markers)}")
    assert not unmarked, "\n".join(unmarked)
    assert seen == set(found), set(found) - seen  # every test found was collected and checked
