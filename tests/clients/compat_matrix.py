"""The compatibility matrix (docs/compatibility.md), generated from the tests' ``compat`` markers.

A test that proves a client works with a feature is marked
``@pytest.mark.compat(client="<client>", feature="<feature>")``; a test that proves a clear refusal
adds ``refused="<reason>"``. This script collects those markers with pytest (every test module
under tests/ that uses the marker) and writes the matrix: client x feature = works (the tests that
prove it), refused (with the reason and the test), or not tested, each saying what the tests ran
against: the real local models (a test also marked ``e2e``: llama-server behind the demo's
gateway) or the scripted upstream (tests/support/scripted_upstream.py plays the models). A test
that runs its client other than as installed says how with ``settings="<how>"`` (shown in the cell
and beside the test). The suite
runs every test, so a cell is only as true as its passing tests; tests/clients/test_compat_matrix.py
fails when the file is out of date.

    python tests/clients/compat_matrix.py --write   # regenerate docs/compatibility.md
    python tests/clients/compat_matrix.py --check   # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
import tomllib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DOC = REPO_ROOT / "docs" / "compatibility.md"
NPM_PACKAGE = REPO_ROOT / "tests" / "clients" / "npm" / "package.json"

# client -> (what it is, where its pinned version comes from: ("pip", dist) or ("npm", package))
CLIENTS: dict[str, tuple[str, tuple[str, str]]] = {
    "openai-sdk": ("the openai Python SDK", ("pip", "openai")),
    "anthropic-sdk": ("the anthropic Python SDK", ("pip", "anthropic")),
    "openai-agents": ("the OpenAI Agents SDK (Python)", ("pip", "openai-agents")),
    "langchain-openai": ("LangChain's ChatOpenAI", ("pip", "langchain-openai")),
    "pydantic-ai": ("pydantic-ai agents over the OpenAI chat model", ("pip", "pydantic-ai-slim")),
    "claude-code": ("Claude Code, `claude -p`", ("npm", "@anthropic-ai/claude-code")),
    "codex": ("Codex CLI, `codex exec`", ("npm", "@openai/codex")),
}
FEATURES = ["text", "stream", "tools", "structured-output", "tier-by-alias", "tier-by-header"]
# What a test ran against: the real local models (marked ``e2e``) or the scripted upstream.
LOCAL, SCRIPTED = "local models", "scripted"


@dataclass(frozen=True, order=True)
class Proof:
    """One ``compat`` marker on one collected test."""

    client: str
    feature: str
    nodeid: str
    refused: str | None = None
    against: str = SCRIPTED  # LOCAL for a test marked ``e2e``
    settings: str | None = None  # how the client was run, when not as installed


class _Recorder:
    """A pytest plugin that keeps the ``compat`` markers of the collected items."""

    def __init__(self) -> None:
        self.proofs: list[Proof] = []
        self.errors: list[str] = []

    def pytest_collection_modifyitems(self, items: list[Any]) -> None:
        for item in items:
            against = LOCAL if item.get_closest_marker("e2e") is not None else SCRIPTED
            for marker in item.iter_markers("compat"):
                try:
                    self.proofs.append(_proof(item.nodeid, *marker.args, **marker.kwargs, against=against))
                except (TypeError, ValueError) as exc:
                    self.errors.append(f"{item.nodeid}: {exc}")

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.errors.append(f"collecting {report.nodeid} failed:\n{report.longreprtext}")


def _proof(
    nodeid: str,
    client: str,
    feature: str,
    refused: str | None = None,
    *,
    against: str = SCRIPTED,
    settings: str | None = None,
) -> Proof:
    if client not in CLIENTS:
        raise ValueError(f"unknown compat client {client!r} (known: {', '.join(CLIENTS)})")
    if feature not in FEATURES:
        raise ValueError(f"unknown compat feature {feature!r} (known: {', '.join(FEATURES)})")
    if refused is not None and not refused.strip():
        raise ValueError("refused= needs the reason the gateway gives")
    if settings is not None and not settings.strip():
        raise ValueError("settings= needs how the client was run")
    return Proof(client, feature, nodeid, refused, against, settings)


def marked_test_files(root: Path = REPO_ROOT) -> list[str]:
    """Paths of the test modules under tests/ that use the ``compat`` marker (the ones to collect)."""
    pattern = re.compile(r"\bcompat\(")
    files = [p for p in sorted((root / "tests").rglob("test_*.py")) if pattern.search(p.read_text())]
    return [str(p) for p in files]


def collect(root: Path = REPO_ROOT) -> list[Proof]:
    """Every ``compat`` marker of the suite (pytest collection, no test is run)."""
    import pytest

    recorder = _Recorder()
    files = marked_test_files(root)
    if not files:
        return []
    output = io.StringIO()
    with contextlib.redirect_stdout(output):  # pytest's own report: only shown when collection fails
        code = pytest.main(
            ["--collect-only", "-qq", "-p", "no:cacheprovider", "--rootdir", str(root), *files],
            plugins=[recorder],
        )
    if recorder.errors or code not in (0, 5):
        problems = "\n".join(recorder.errors) or output.getvalue()
        raise SystemExit(f"compat markers could not be collected (pytest exit {code}):\n{problems}")
    return sorted(set(recorder.proofs))


def pinned_versions(root: Path = REPO_ROOT) -> dict[str, str]:
    """client -> the version requirement the repository pins (pyproject's test extra, package.json)."""
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    requirements = pyproject["project"]["optional-dependencies"]["test"]
    npm = json.loads(NPM_PACKAGE.read_text())["dependencies"] if NPM_PACKAGE.exists() else {}
    versions: dict[str, str] = {}
    for client, (_, (registry, name)) in CLIENTS.items():
        if registry == "npm":
            versions[client] = f"{name}@{npm[name]}" if name in npm else "not pinned"
            continue
        found = [r for r in requirements if re.match(rf"{re.escape(name)}(\[[^\]]*\])?\s*[<>=!~]", r)]
        versions[client] = found[0].replace(" ", "") if found else "not pinned"
    return versions


def render(proofs: list[Proof], versions: dict[str, str]) -> str:
    """The Markdown of docs/compatibility.md."""
    cells: dict[tuple[str, str], list[Proof]] = defaultdict(list)
    for proof in proofs:
        cells[(proof.client, proof.feature)].append(proof)
    lines = [
        "# Compatibility matrix",
        "",
        "Which clients work with the gateway, feature by feature. Generated from the `compat` markers",
        "of the test suite by `python tests/clients/compat_matrix.py --write`; do not edit by hand",
        "(tests/clients/test_compat_matrix.py fails when this file is out of date). A cell is",
        "**works** when tests drive that client, installed at the pinned version, through the gateway",
        "and check that feature; **refused** when a test checks that the gateway refuses it with a",
        "clear error (the reason is given below); **not tested** otherwise. The suite",
        "(`bash scripts/test.sh`) runs every test listed here.",
        "",
        "Each cell says what its tests ran against:",
        "",
        f"* **{LOCAL}**: the real models of the local pool (llama-server) behind the demo's gateway",
        "  (`policies/local-demo.json`, tests marked `e2e`): the client completed a task with the",
        "  answers real small models gave (times:",
        "  [local-models.md](local-models.md#agent-clis-on-the-local-pool)).",
        f"* **{SCRIPTED}**: the scripted upstream (`tests/support/scripted_upstream.py`) plays the",
        "  models with fixed answers: the gateway's side of the protocol (translation, streaming, tool",
        "  calls, tiers) is checked exactly, but no model's answer is.",
        "",
        "Features: **text** (a plain answer), **stream** (a streamed answer), **tools** (a function",
        "tool call and its result), **structured-output** (a JSON-schema result), **tier-by-alias**",
        "(`model: cascade/<tier>`), **tier-by-header** (`X-Cascade-Tier`).",
        "",
        "| client | " + " | ".join(FEATURES) + " |",
        "|---|" + "---|" * len(FEATURES),
    ]
    for client in CLIENTS:
        row = [_status(cells.get((client, feature), [])) for feature in FEATURES]
        lines.append(f"| {client} | " + " | ".join(row) + " |")
    lines += ["", "## Clients", "", "| client | what | pinned |", "|---|---|---|"]
    for client, (what, _) in CLIENTS.items():
        lines.append(f"| {client} | {what} | `{versions[client]}` |")
    lines += ["", "## The tests behind each cell", ""]
    for client in CLIENTS:
        marked = [f for f in FEATURES if cells.get((client, f))]
        if not marked:
            continue
        lines += [f"### {client}", ""]
        for feature in marked:
            for proof in cells[(client, feature)]:
                how = f"refused ({proof.refused})" if proof.refused else "works"
                run = f" ({proof.settings})" if proof.settings else ""
                lines.append(f"- {feature}: {how}, {proof.against}{run}: `{proof.nodeid}`")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _status(proofs: list[Proof]) -> str:
    works = [p for p in proofs if p.refused is None]
    refused = [p for p in proofs if p.refused is not None]
    parts = []
    if works:
        counts = [(where, sum(p.against == where for p in works)) for where in (LOCAL, SCRIPTED)]
        parts.append("works (" + ", ".join(f"{where}: {n}" for where, n in counts if n) + ")")
        parts += sorted({f"{p.against}: {p.settings}" for p in works if p.settings})
    if refused:
        parts.append("refused: " + "; ".join(sorted({p.refused or "" for p in refused})))
    return ", ".join(parts) or "not tested"


def main(argv: list[str] | None = None) -> int:
    """``--write`` the matrix or ``--check`` that docs/compatibility.md is current."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="write docs/compatibility.md")
    action.add_argument("--check", action="store_true", help="exit 1 if docs/compatibility.md is stale")
    args = parser.parse_args(argv)
    text = render(collect(), pinned_versions())
    if args.write:
        DOC.write_text(text)
        print(f"wrote {DOC.relative_to(REPO_ROOT)}")
        return 0
    current = DOC.read_text() if DOC.exists() else ""
    if current != text:
        print(
            "docs/compatibility.md is out of date with the tests' compat markers: "
            "run `python tests/clients/compat_matrix.py --write`",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
