"""The fail-over table (run by hand): every scenario of the fail-over suite on chat, Responses and
Messages, streamed and not, and what the client got, against the gateway code on ``PYTHONPATH``.

The suite itself (tests/support/failover_suite.py, its scenarios and clients) always comes from
this checkout; the gateway code (``gateway``, ``money``, ``policies``, ...) from ``PYTHONPATH``, so
the same table runs against an older checkout, its config left without the fields it did not know:

    git archive 5570ff5 | tar -x -C /tmp/before-5570ff5   # (mkdir it first)
    PYTHONPATH=/tmp/before-5570ff5 .venv/bin/python bench/gateway/failover_table.py
    PYTHONPATH=$PWD .venv/bin/python bench/gateway/failover_table.py

Prints the markdown table (scenario x API x streamed -> verdict) and the seconds it took. Writes
only under a temporary directory, removed at the end. tests/gateway/test_failover_suite.py runs
the same cells in the test command.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ADMIN_KEY = "sk-test-admin"


def _suite_from_this_checkout() -> None:
    """Make ``tests.*`` this checkout's (``tests`` is a namespace package: its path is replaced),
    whatever checkout ``PYTHONPATH`` names for the gateway code."""
    import tests

    tests.__path__ = [str(ROOT / "tests")]


def main() -> int:
    """Run the table and print it."""
    _suite_from_this_checkout()
    for name in ("CASCADE_API_KEYS", "CASCADE_POLICY", "CASCADE_REDIS_URL"):
        os.environ.pop(name, None)
    os.environ["CASCADE_ADMIN_KEY"] = ADMIN_KEY
    import gateway
    from tests.support.failover_suite import RECORD, run_table
    from tests.support.scripted_upstream import running_upstream

    print(f"gateway code: {Path(gateway.__file__).parent.parent}", file=sys.stderr)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="failover-table-") as workdir, running_upstream() as upstream:
        for cell, verdict in run_table(upstream, Path(workdir)):
            print(f"{cell.id}: {verdict}", file=sys.stderr)
    print("\n".join(RECORD.table()))
    print(f"\n{len(RECORD.verdicts)} cells in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
