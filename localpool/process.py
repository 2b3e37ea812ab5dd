"""Background processes that outlive the command that started them: pid files, health, clean stop.

A process is started in its own session (so a terminal's Ctrl-C does not reach it and a stop can
signal its whole group), with stdout/stderr appended to a log file and a JSON pid file recording the
pid and the executable, so a stale pid file (or a reused pid) is never mistaken for a live server.

When a process dies, it says how: the exit status of a process this command started is kept (its
``Popen`` is held in ``_STARTED``, so no other reaping loses it) and described as ``exit code N``
or ``signal SIGILL (illegal instruction)``; ``record_exit`` writes it into the pid file, so that a
later ``cascade models status`` can still show it. A pid file whose process is gone and that
records no exit belonged to a process some other command started: all that is known is that it is
gone, and its log's last line.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, replace
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
    exit: str | None = None  # how it ended (``describe_exit``), once known


# Processes this process started, by pid: their exit status is read from here (see module doc).
_STARTED: dict[int, subprocess.Popen[bytes]] = {}


def adopt(process: subprocess.Popen[bytes]) -> None:
    """Keep the exit status of a process started elsewhere (``subprocess.Popen``) for ``exit_status``."""
    _STARTED[process.pid] = process


def describe_exit(returncode: int) -> str:
    """``exit code N`` or ``signal SIGILL (illegal instruction)`` for a ``Popen.returncode``."""
    if returncode >= 0:
        return f"exit code {returncode}"
    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    reason = signal.strsignal(number)
    return f"signal {name} ({reason[0].lower() + reason[1:]})" if reason else f"signal {name}"


def exit_status(pid: int) -> str | None:
    """How a process this process started ended (``describe_exit``); None if running or not ours."""
    child = _STARTED.get(pid)
    if child is None or child.poll() is None:
        return None
    return describe_exit(child.returncode)


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
    adopt(process)
    record = ProcessRecord(pid=process.pid, executable=os.path.basename(argv[0]), port=port)
    _write_record(pid_path, record)
    return record


def _write_record(pid_path: Path, record: ProcessRecord) -> None:
    fields = {k: v for k, v in asdict(record).items() if v is not None or k == "port"}
    pid_path.write_text(json.dumps(fields) + "\n")


def load_record(pid_path: Path) -> ProcessRecord | None:
    """What a pid file says, alive or not (None if there is none or it is unreadable)."""
    try:
        return ProcessRecord(**json.loads(pid_path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def read_record(pid_path: Path) -> ProcessRecord | None:
    """The record of a pid file if its process is still alive (a stale file is left for ``status``)."""
    record = load_record(pid_path)
    if record is not None and is_alive(record.pid, record.executable):
        return record
    return None


def record_exit(pid_path: Path, pid: int) -> str | None:
    """Write how the (dead) process ``pid`` ended into its pid file; that description, if known."""
    how = exit_status(pid)
    record = load_record(pid_path)
    if how is not None and record is not None and record.pid == pid:
        _write_record(pid_path, replace(record, exit=how))
    return how


def death_report(record: ProcessRecord, log_path: Path) -> str:
    """One line on a pid file's dead process: how it ended (or that it is gone) and its log's last line."""
    how = f"exited with {record.exit}" if record.exit else f"pid {record.pid} is gone (exit status unknown)"
    return f"{how}; last log line: {last_log_line(log_path)!r} (see {log_path})"


def is_alive(pid: int, executable: str | None = None) -> bool:
    """True if ``pid`` runs (not a zombie) and, when given, its command line names ``executable``."""
    child = _STARTED.get(pid)
    if child is not None and child.poll() is not None:
        return False  # ours, and ended: its status stays in ``_STARTED``
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
                how = exit_status(pid)
                ended = f"exited during start-up with {how}" if how else "exited during start-up"
                raise ProcessError(
                    f"{name} {ended}; last log line: {last_log_line(log_path)!r} (see {log_path})"
                )
            if time.monotonic() - started > timeout_s:
                raise ProcessError(
                    f"{name} not healthy at {url} after {timeout_s:.0f}s; last log line: "
                    f"{last_log_line(log_path)!r} (see {log_path})"
                )
            time.sleep(0.25)


def last_log_line(log_path: Path) -> str:
    """The last non-blank line of a log (read from its last 4 KiB); empty if there is none."""
    try:
        with log_path.open("rb") as handle:
            handle.seek(max(0, log_path.stat().st_size - 4096))
            lines = [line for line in handle.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""
