"""Every relative link in README.md and docs/*.md resolves: the file exists and so does the heading."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} +(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(text: str) -> list[str]:
    """The lines of a Markdown text outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchor_of(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file (repeated headings get GitHub's -1, -2, ... too)."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(path.read_text()):
        match = _HEADING.match(line)
        if match is None:
            continue
        anchor = anchor_of(match.group(1))
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def relative_links(path: Path) -> list[str]:
    """The link targets of a Markdown file that point inside the repository."""
    targets = []
    for line in prose_lines(path.read_text()):
        for target in _LINK.findall(line):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
                targets.append(target)
    return targets


def broken_links(path: Path, repo_root: Path) -> list[str]:
    """The relative links of ``path`` whose file or heading does not exist."""
    broken = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists() or not linked.is_relative_to(repo_root.resolve()):
            broken.append(f"{target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target} (no heading #{anchor} in {linked.relative_to(repo_root.resolve())})")
    return broken


def documents(repo_root: Path) -> list[Path]:
    return [repo_root / "README.md", *sorted((repo_root / "docs").glob("*.md"))]


def test_anchor_of_follows_github() -> None:
    assert anchor_of("Sampling the gateway's own traffic") == "sampling-the-gateways-own-traffic"
    assert anchor_of("`cascade recalibrate`") == "cascade-recalibrate"
    assert anchor_of("On the demo task: arithmetic, `numeric`, `exact` and `llm` judges") == (
        "on-the-demo-task-arithmetic-numeric-exact-and-llm-judges"
    )


def test_broken_links_are_found(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/a.md").write_text("# A page\n\n## Part one\n")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/a.md#part-one) [gone](docs/b.md) [bad](docs/a.md#part-two) [web](https://x.org/y)\n"
        "```\n[in code](docs/c.md)\n```\n"
    )
    assert broken_links(page, tmp_path) == [
        "docs/b.md (no such file)",
        "docs/a.md#part-two (no heading #part-two in docs/a.md)",
    ]


@pytest.mark.parametrize("name", ["README.md", "docs"])
def test_every_relative_link_resolves(repo_root: Path, name: str) -> None:
    pages = [p for p in documents(repo_root) if (p.name == "README.md") == (name == "README.md")]
    assert pages
    broken = {str(p.relative_to(repo_root)): broken_links(p, repo_root) for p in pages}
    assert {page: links for page, links in broken.items() if links} == {}
