"""Background processes that outlive the command that started them: pid files, health, clean stop.

A process is started in its own session (so a terminal's Ctrl-C does not reach it and a stop can
signal its whole group), with stdout/stderr appended to a log file and a JSON pid file recording the
pid and the executable, so a stale pid file (or a reused pid) is never mistaken for a live server.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx


class ProcessError(Exception):
    """A managed process failed to start or to become healthy; the message names its log."""


@dataclass(frozen=True)
class ProcessRecord:
    """What a pid file says about a started process."""

    pid: int
    executable: str
    port: int | None = None


def start_detached(
    argv: list[str], log_path: Path, pid_path: Path, *, port: int | None = None
) -> ProcessRecord:
    """Start ``argv`` in a new session, output appended to ``log_path``; write ``pid_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    pid_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    record = ProcessRecord(pid=process.pid, executable=os.path.basename(argv[0]), port=port)
    pid_path.write_text(json.dumps(record.__dict__) + "\n")
    return record


def read_record(pid_path: Path) -> ProcessRecord | None:
    """The record of a pid file if its process is still alive (a stale file is removed)."""
    try:
        record = ProcessRecord(**json.loads(pid_path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    if is_alive(record.pid, record.executable):
        return record
    pid_path.unlink(missing_ok=True)
    return None


def is_alive(pid: int, executable: str | None = None) -> bool:
    """True if ``pid`` runs (not a zombie) and, when given, its command line names ``executable``."""
    _reap(pid)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] in {"Z", "X"}:
        return False
    if executable is None:
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(os.path.basename(part.decode(errors="replace")) == executable for part in cmdline[:2])


def _reap(pid: int) -> None:
    """Collect the exit status if the process is our own child (else it is init's to reap)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def stop(pid: int, *, grace_s: float = 10.0, executable: str | None = None) -> str:
    """SIGTERM the process group, SIGKILL after ``grace_s``: "stopped", "killed" or "not running"."""
    if not is_alive(pid, executable):
        return "not running"
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not is_alive(pid):
            return "stopped"
        time.sleep(0.05)
    _signal_group(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return "killed"


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)  # started with start_new_session: its group id is its pid
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def wait_healthy(url: str, *, pid: int, log_path: Path, timeout_s: float, name: str) -> float:
    """Poll ``url`` until it answers 200; returns seconds waited.

    Raises ``ProcessError`` if the process exits first or ``timeout_s`` passes (the message names
    the log and quotes its last line).
    """
    started = time.monotonic()
    with httpx.Client(timeout=2.0) as client:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if client.get(url).status_code == 200:
                    return time.monotonic() - started
            if not is_alive(pid):
                raise ProcessError(
                    f"{name} exited during start-up; last log line: {_last_line(log_path)!r} (see {log_path})"
                )
            if time.monotonic() - started > timeout_s:
                raise ProcessError(
                    f"{name} not healthy at {url} after {timeout_s:.0f}s; last log line: "
                    f"{_last_line(log_path)!r} (see {log_path})"
                )
            time.sleep(0.25)


def _last_line(log_path: Path) -> str:
    try:
        with log_path.open("rb") as handle:
            handle.seek(max(0, log_path.stat().st_size - 4096))
            lines = [line for line in handle.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""
