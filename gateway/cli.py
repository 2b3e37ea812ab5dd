"""Commands of this package, mounted on the root ``cascade`` app."""

from __future__ import annotations

import typer

from gateway.policy_cli import register as register_policy


def register(app: typer.Typer) -> None:
    """Add this package's commands to the root app."""
    register_policy(app)  # `cascade policy push|show`, `cascade keys add|list|revoke`
