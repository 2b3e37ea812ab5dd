"""How console pages are rendered: Jinja2 templates (``gateway/console/templates``), one base layout
with the navigation, the filters every page formats numbers with, and the response headers of every
page (no caching, a Content-Security-Policy allowing only the console's own scripts and styles).

A page handler returns ``views.page(request, "name.html", title=..., **values)``; a request htmx
sent (``HX-Request``) for a part of a page gets ``views.part(...)``, the same template without the
layout. Both read the page's navigation from the registered pages (gateway.console.pages).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse

PREFIX = "/console"
TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"

SECURITY_HEADERS = {
    "cache-control": "no-store",
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}


@dataclass(frozen=True, slots=True)
class NavItem:
    """One entry of the navigation: its title and path under ``/console``."""

    title: str
    path: str


@dataclass(slots=True)
class Views:
    """The template environment and the navigation (filled by gateway.console.mount)."""

    nav: list[NavItem] = field(default_factory=list)
    env: jinja2.Environment = field(default_factory=lambda: _environment())

    def page(
        self, request: Request, template: str, *, title: str, status: int = 200, **values: Any
    ) -> HTMLResponse:
        """A whole page: ``template`` inside the layout, with the navigation."""
        html = self.env.get_template(template).render(
            request=request,
            title=title,
            nav=self.nav,
            prefix=PREFIX,
            current=request.url.path,
            access=getattr(request.state, "console_access", None),
            **values,
        )
        return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)

    def part(self, template: str, *, status: int = 200, **values: Any) -> HTMLResponse:
        """A part of a page (no layout), for an htmx swap."""
        html = self.env.get_template(template).render(prefix=PREFIX, **values)
        return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def wants_part(request: Request) -> bool:
    """Whether htmx asked for a part of the page (not a boosted navigation)."""
    return request.headers.get("hx-request") == "true" and request.headers.get("hx-boosted") != "true"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(usd=usd, ms=milliseconds, when=when, number=number, score=score_text)
    return env


def usd(value: float | None) -> str:
    """USD with up to 6 significant digits (``$0.00012``), ``-`` for none."""
    if value is None:
        return "-"
    return "$0" if value == 0 else f"${value:.6g}"


def milliseconds(value: float | None) -> str:
    """Milliseconds: ``850 ms``, ``1.25 s``."""
    if value is None:
        return "-"
    return f"{value:.0f} ms" if value < 1000 else f"{value / 1000:.2f} s"


def when(value: float | None) -> str:
    """A unix time as UTC ``2026-12-06 06:40:12``."""
    if value is None:
        return "-"
    return dt.datetime.fromtimestamp(value, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def number(value: float | int | None) -> str:
    """A count with thousands separators."""
    return "-" if value is None else f"{value:,}"


def score_text(value: float | None) -> str:
    """A score or threshold with 4 decimals; ``none`` when there was none (no logprobs)."""
    return "none" if value is None else f"{value:.4f}"


def choices(values: Sequence[str]) -> list[str]:
    """Sorted distinct non-empty values (a filter's options)."""
    return sorted({value for value in values if value})
