"""How every ``cascade`` command fails: one red ``error: ...`` line on stderr and an exit code.

Shared by the packages' command modules so that a failure looks the same whichever command it
comes from, and never shows a traceback. It imports only typer: any package may use it.
"""

from __future__ import annotations

from typing import NoReturn

import typer


def fail(message: str, *, code: int = 1) -> NoReturn:
    """Print ``error: message`` in red on stderr and exit with ``code`` (1 unless said otherwise)."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)
