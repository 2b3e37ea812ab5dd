"""The README stays a short read that points at every docs page and lists every command; no page points
outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from cascade_cli.main import app

README_MAX_LINES = 350


def test_readme_is_a_ten_minute_read(repo_root: Path) -> None:
    lines = (repo_root / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_readme_links_every_docs_page(repo_root: Path) -> None:
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)", (repo_root / "README.md").read_text()))
    pages = {page.name for page in (repo_root / "docs").glob("*.md")}
    assert pages - linked == set()


def test_no_page_points_at_a_design_document_outside_the_repository(repo_root: Path) -> None:
    assert not (repo_root / "DESIGN.md").exists()
    for page in [repo_root / "README.md", *(repo_root / "docs").glob("*.md")]:
        where = page.relative_to(repo_root)
        assert "DESIGN" not in page.read_text(), f"{where} refers to a design document not in the repo"


def test_the_command_table_lists_every_command(repo_root: Path) -> None:
    readme = (repo_root / "README.md").read_text()
    table = [line for line in readme.splitlines() if line.startswith("| `cascade ")]
    listed = {line.split("`cascade ", 1)[1].split()[0].rstrip("`") for line in table}
    commands = set(typer.main.get_command(app).commands) - {"version"}  # `cascade version` needs no row
    assert commands - listed == set()
