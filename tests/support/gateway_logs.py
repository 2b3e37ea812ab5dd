"""The gateway's per-request log lines, read as a test sees them."""

from __future__ import annotations

import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import orjson


def request_lines(
    log: Path, wanted: Collection[str] = (), timeout_s: float = 30.0
) -> dict[str, dict[str, Any]]:
    """The gateway's ``request`` log lines by request id, once every ``wanted`` id has one.

    A streamed request's line is written when the gateway finishes the request, which may be just
    after the client read the last event: this waits for the lines (up to ``timeout_s``), not for a
    fixed time, and returns what is there at the deadline (the caller's assertion then says which
    line is missing).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        lines: dict[str, dict[str, Any]] = {}
        for raw in log.read_bytes().splitlines():
            if raw.startswith(b"{"):
                entry = orjson.loads(raw)
                if entry.get("event") == "request":
                    lines[entry["request_id"]] = entry
        if set(wanted) <= set(lines) or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)
