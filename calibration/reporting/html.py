"""One self-contained HTML report page: text, tables and PNG figures embedded as base64.

Usage::

    from calibration.reporting.html import Figure, Section, Table, write_html_report

    write_html_report(
        "reports/calibration.html",
        "Calibration of runs.csv.gz",
        [
            Section("Models", [Table(["model", "cost"], [["a", 0.1]]), "Some text."]),
            Section("Envelope", [Figure.from_file("reports/envelope.png", caption="...")]),
        ],
    )

The page needs no network and no other file: it can be mailed or attached to a CI run.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Table:
    """A table: column headers and rows of cells (numbers are formatted, text is escaped)."""

    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    caption: str = ""


@dataclass(frozen=True)
class Figure:
    """A PNG image (raw bytes) with an optional caption."""

    png: bytes
    caption: str = ""

    @classmethod
    def from_file(cls, path: str | Path, caption: str = "") -> Figure:
        """A figure from a PNG file on disk."""
        return cls(Path(path).read_bytes(), caption)


@dataclass(frozen=True)
class Preformatted:
    """Monospaced text (a command line, a config snippet), shown as-is."""

    text: str


Block = str | Table | Figure | Preformatted


@dataclass(frozen=True)
class Section:
    """A titled part of the page; ``blocks`` are shown in order (a str is a paragraph)."""

    title: str
    blocks: Sequence[Block] = field(default_factory=list)


_STYLE = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2rem auto; max-width: 72rem;
       padding: 0 1rem; color: #1f2328; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.25rem; margin-top: 2rem;
     border-bottom: 1px solid #d0d7de; padding-bottom: .3rem; }
.meta { color: #656d76; font-size: .9rem; }
table { border-collapse: collapse; margin: .8rem 0; font-size: .9rem; }
th, td { border: 1px solid #d0d7de; padding: .3rem .6rem; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f6f8fa; } caption { caption-side: bottom; color: #656d76; font-size: .85rem; }
figure { margin: 1rem 0; } img { max-width: 100%; } figcaption { color: #656d76; font-size: .85rem; }
pre { background: #f6f8fa; padding: .6rem; overflow-x: auto; }
"""


def format_cell(value: Any) -> str:
    """Text of one table cell: None as an em dash, floats with 4 significant digits."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        return f"{value:.4g}"
    return str(value)


def render_html(title: str, sections: Sequence[Section], subtitle: str | None = None) -> str:
    """The whole page as an HTML string."""
    created = datetime.now(UTC).isoformat(timespec="seconds")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="meta">{html.escape(subtitle + " · " if subtitle else "")}generated {created}</p>',
    ]
    for section in sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        parts.extend(_render_block(block) for block in section.blocks)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_html_report(
    path: str | Path, title: str, sections: Sequence[Section], subtitle: str | None = None
) -> Path:
    """Write one self-contained HTML page (figures embedded) to ``path``; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(title, sections, subtitle), encoding="utf-8")
    return path


def _render_block(block: Block) -> str:
    if isinstance(block, str):
        return f"<p>{html.escape(block)}</p>"
    if isinstance(block, Preformatted):
        return f"<pre>{html.escape(block.text)}</pre>"
    if isinstance(block, Figure):
        data = base64.b64encode(block.png).decode("ascii")
        caption = f"<figcaption>{html.escape(block.caption)}</figcaption>" if block.caption else ""
        alt = html.escape(block.caption or "figure", quote=True)
        return f'<figure><img src="data:image/png;base64,{data}" alt="{alt}">{caption}</figure>'
    if isinstance(block, Table):
        return _render_table(block)
    raise TypeError(f"cannot render a {type(block).__name__} block in an HTML report")


def _render_table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in table.columns)
    body = []
    for row in table.rows:
        cells = []
        for value in row:
            numeric = isinstance(value, int | float) and not isinstance(value, bool)
            css = ' class="num"' if numeric else ""
            cells.append(f"<td{css}>{html.escape(format_cell(value))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    caption = f"<caption>{html.escape(table.caption)}</caption>" if table.caption else ""
    return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
