"""How the calibration commands fail: one red line and exit code 1, never a traceback."""

from __future__ import annotations

from collections.abc import Callable

import typer

from cli_failure import fail


def one_line_message(exc: BaseException) -> str:
    """The first line of an error, with the file for OS errors and the type for unexpected ones."""
    from calibration.runs_columns import RunsError
    from calibration.tiers import TiersError
    from policies.errors import PolicyError

    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename or ''}: {exc.strerror}".strip(": ")
    if isinstance(exc, RunsError | TiersError | PolicyError | ValueError | KeyError):
        return text.strip("'\"")
    return f"{type(exc).__name__}: {text}"


def run_or_exit(command: Callable[[], object]) -> None:
    """Run a command body; any failure becomes one red line on stderr and exit code 1."""
    try:
        command()
    except typer.Exit:
        raise
    except Exception as exc:  # every failure is one red line and exit 1, never a traceback
        fail(one_line_message(exc))
