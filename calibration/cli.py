"""Commands of this package, mounted on the root ``cascade`` app."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this package's commands to the root app."""
