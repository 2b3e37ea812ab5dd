"""The gateway's per-request log lines, read as a test sees them."""

from __future__ import annotations

import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import orjson
import pytest


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
        # Only whole lines: the gateway may be writing the last one while it is read.
        whole, _, _ = log.read_bytes().rpartition(b"\n")
        for raw in whole.splitlines():
            if raw.startswith(b"{"):
                entry = orjson.loads(raw)
                if entry.get("event") == "request":
                    lines[entry["request_id"]] = entry
        if set(wanted) <= set(lines) or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def captured_request_lines(
    capfd: pytest.CaptureFixture[str], count: int = 1, timeout_s: float = 30.0
) -> list[dict[str, Any]]:
    """The ``request`` log lines an in-process gateway wrote to stderr since the last read, once
    there are ``count`` of them (waiting up to ``timeout_s``; what is there at the deadline
    otherwise, for the caller's assertion to show)."""
    lines: list[dict[str, Any]] = []
    pending = ""  # a line being written when it was read: completed by the next read, not dropped
    end = time.monotonic() + timeout_s
    while True:
        # The deadline is checked after a read, so a line written while the last wait ran is read.
        past_deadline = time.monotonic() >= end
        whole, _, pending = (pending + capfd.readouterr().err).rpartition("\n")
        lines += [
            orjson.loads(x) for x in whole.splitlines() if x.startswith("{") and '"event":"request"' in x
        ]
        if len(lines) >= count or past_deadline:
            return lines
        time.sleep(0.02)


def captured_request_line(capfd: pytest.CaptureFixture[str], timeout_s: float = 30.0) -> dict[str, Any]:
    """The one ``request`` log line written since the last read (fails if there are more)."""
    (line,) = captured_request_lines(capfd, 1, timeout_s)
    return line
