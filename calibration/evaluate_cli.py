"""Commands of this module, mounted on the root ``cascade`` app."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
