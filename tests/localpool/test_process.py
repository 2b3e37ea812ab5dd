"""Process manager: detached start with pid file and log, health wait, SIGTERM then SIGKILL."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from localpool.process import ProcessError, is_alive, read_record, start_detached, stop, wait_healthy
from tests.support.ports import free_port

SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]
STUBBORN = [
    sys.executable,
    "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); "
    "time.sleep(60)",
]


def _wait_for_log(path: Path, text: str) -> None:
    deadline = time.monotonic() + 10
    while text not in (path.read_text() if path.exists() else ""):
        assert time.monotonic() < deadline, f"{text!r} never appeared in {path}"
        time.sleep(0.02)


def test_started_process_is_recorded_and_stops_on_sigterm(tmp_path: Path) -> None:
    log, pid_file = tmp_path / "run" / "x.log", tmp_path / "run" / "x.pid"
    record = start_detached(SLEEPER, log, pid_file, port=1234)
    try:
        _wait_for_log(log, "up")
        assert read_record(pid_file) == record
        assert is_alive(record.pid, record.executable)
        assert stop(record.pid, grace_s=5) == "stopped"
        assert not is_alive(record.pid)
        assert read_record(pid_file) is None and pid_file.exists()  # kept for `status`; `down` removes it
    finally:
        stop(record.pid, grace_s=0.1)


def test_process_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    log = tmp_path / "stubborn.log"
    record = start_detached(STUBBORN, log, tmp_path / "stubborn.pid")
    try:
        _wait_for_log(log, "up")
        started = time.monotonic()
        assert stop(record.pid, grace_s=0.5) == "killed"
        assert time.monotonic() - started >= 0.5
        assert not is_alive(record.pid)
    finally:
        stop(record.pid, grace_s=0.1)


def test_pid_file_of_another_program_is_not_trusted(tmp_path: Path) -> None:
    record = start_detached(SLEEPER, tmp_path / "a.log", tmp_path / "a.pid")
    try:
        pid_file = tmp_path / "a.pid"
        pid_file.write_text(pid_file.read_text().replace(record.executable, "llama-server"))
        assert read_record(pid_file) is None  # pid alive, but it is not that program
    finally:
        stop(record.pid, grace_s=1)


def test_wait_healthy_returns_once_the_server_answers(tmp_path: Path) -> None:
    port = free_port()
    server = [
        sys.executable,
        "-m",
        "http.server",
        str(port),
        "--bind",
        "127.0.0.1",
        "--directory",
        str(tmp_path),
    ]
    record = start_detached(server, tmp_path / "http.log", tmp_path / "http.pid")
    try:
        waited = wait_healthy(
            f"http://127.0.0.1:{port}/",
            pid=record.pid,
            log_path=tmp_path / "http.log",
            timeout_s=20,
            name="http",
        )
        assert waited < 20
    finally:
        stop(record.pid, grace_s=2)


def test_wait_healthy_reports_an_early_exit_with_the_log(tmp_path: Path) -> None:
    failing = [sys.executable, "-c", "import sys; print('model file is corrupt', flush=True); sys.exit(3)"]
    log = tmp_path / "bad.log"
    record = start_detached(failing, log, tmp_path / "bad.pid")
    with pytest.raises(
        ProcessError,
        match=r"bad exited during start-up with exit code 3; last log line: 'model file is corrupt'",
    ):
        wait_healthy(
            f"http://127.0.0.1:{free_port()}/health", pid=record.pid, log_path=log, timeout_s=20, name="bad"
        )


def test_wait_healthy_times_out_pointing_at_the_log(tmp_path: Path) -> None:
    log = tmp_path / "slow.log"
    record = start_detached(SLEEPER, log, tmp_path / "slow.pid")
    try:
        with pytest.raises(ProcessError, match=r"slow not healthy at .* after 1s; .*slow\.log"):
            wait_healthy(
                f"http://127.0.0.1:{free_port()}/health",
                pid=record.pid,
                log_path=log,
                timeout_s=1,
                name="slow",
            )
    finally:
        stop(record.pid, grace_s=1)
