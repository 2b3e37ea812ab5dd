"""The smoke test of a llama-server build: load the smallest model, generate one token, stop.

A build that compiles is not a build that runs: a CPU can advertise an instruction set its
hypervisor does not allow (AMX on many cloud VMs), and the server then dies with SIGILL at its first
matrix product. Running one real generation right after every build turns that into a one-line
install failure that says how the server died, instead of a crash in the demo or the tests later.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

from localpool.errors import InstallError

# Why a signal usually kills llama-server, for the one-line reason.
_SIGNAL_HINTS = {
    signal.SIGILL: "illegal instruction: the build uses a CPU instruction this machine cannot run",
    signal.SIGSEGV: "segmentation fault",
    signal.SIGBUS: "bus error",
    signal.SIGKILL: "killed, often by the kernel's out-of-memory killer",
    signal.SIGABRT: "aborted",
}


def describe_exit(returncode: int) -> str:
    """How a process ended, from its return code: ``exit code 3`` or ``signal SIGILL (illegal ...)``."""
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        sig = signal.Signals(-returncode)
    except ValueError:
        return f"signal {-returncode}"
    hint = _SIGNAL_HINTS.get(sig)
    return f"signal {sig.name} ({hint})" if hint else f"signal {sig.name}"


def smoke_test(binary: Path, model: Path, log_path: Path, *, timeout_s: float = 180.0) -> str:
    """Start ``binary`` on ``model``, generate one token, stop it; a one-line summary on success.

    Raises ``InstallError`` with one line (how the server died, its last log line, the log's path)
    if it exits, fails to answer, or is not healthy within ``timeout_s``.
    """
    port = _free_port()
    command = [
        str(binary), "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
        "--threads", "1", "--ctx-size", "256", "--parallel", "1", "--no-webui",
    ]  # fmt: skip
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(timeout=60.0) as client:
            _wait_healthy(client, base, process, log_path, started + timeout_s)
            try:
                reply = client.post(f"{base}/completion", json={"prompt": "Hello", "n_predict": 1})
            except httpx.HTTPError as exc:
                raise _failure(
                    process, log_path, f"generating a token failed ({type(exc).__name__})"
                ) from None
            if reply.status_code != 200 or "content" not in reply.json():
                raise _failure(process, log_path, f"generating a token answered HTTP {reply.status_code}")
        took = time.monotonic() - started
        return f"smoke test passed ({model.name}: loaded and generated a token in {took:.1f}s)"
    finally:
        _stop(process)


def _wait_healthy(
    client: httpx.Client, base: str, process: subprocess.Popen[bytes], log_path: Path, deadline: float
) -> None:
    while True:
        if process.poll() is not None:
            raise _failure(process, log_path, "it exited while loading the model")
        with contextlib.suppress(httpx.HTTPError):
            if client.get(f"{base}/health").status_code == 200:
                return
        if time.monotonic() > deadline:
            raise _failure(process, log_path, "it was not healthy in time")
        time.sleep(0.2)


def _failure(process: subprocess.Popen[bytes], log_path: Path, what: str) -> InstallError:
    code = process.poll()
    if code is None:  # an answer failed while it still runs: give it a moment to finish dying
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = process.wait(timeout=2.0)
    how = describe_exit(code) if code is not None else "still running"
    return InstallError(
        f"llama-server failed its smoke test: {what}; {how}; last log line: {last_log_line(log_path)!r} "
        f"(see {log_path})"
    )


def last_log_line(log_path: Path) -> str:
    """The last non-empty line of a log (read from its last 4 KiB), or ''."""
    try:
        with log_path.open("rb") as handle:
            handle.seek(max(0, log_path.stat().st_size - 4096))
            lines = [line for line in handle.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10.0)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
