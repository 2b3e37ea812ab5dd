"""Start a command with a chosen SIGINT disposition, whatever the test process itself inherited."""

from __future__ import annotations

import sys

# Set SIGINT's disposition, then exec the command: the disposition (default or ignored) is what the
# command inherits, as from a shell that runs it in the foreground or with `&` (SIGINT ignored).
_TRAMPOLINE = (
    "import os, signal, sys; "
    "signal.signal(signal.SIGINT, getattr(signal, sys.argv[1])); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


def with_sigint(disposition: str, command: list[str]) -> list[str]:
    """``command`` (its first item an absolute path) started with SIGINT ``SIG_DFL`` or ``SIG_IGN``."""
    if disposition not in ("SIG_DFL", "SIG_IGN"):
        raise ValueError(f"SIGINT disposition must be SIG_DFL or SIG_IGN, not {disposition!r}")
    return [sys.executable, "-c", _TRAMPOLINE, disposition, *command]
