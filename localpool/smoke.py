"""The smoke test of a llama-server build: load the smallest model, generate one token, stop.

A build that compiles is not a build that runs: a CPU can advertise an instruction set its
hypervisor does not allow (AMX on many cloud VMs), and the server then dies with SIGILL at its first
matrix product. Running one real generation right after every build turns that into a one-line
install failure that says how the server died, instead of a crash in the demo or the tests later.
"""

from __future__ import annotations

import contextlib
import platform
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from localpool.errors import InstallError
from localpool.process import describe_exit, last_log_line

# The reason a build most often dies on a machine it was not made for, spelled out.
_SIGILL_HINT = "the build uses a CPU instruction {cpu} cannot run"
_HERE = "this machine"
# The CPU a portable build is checked on: the x86-64-v2 level (SSE4.2, no AVX), which every x86-64
# server of the last fifteen years exceeds; qemu-user emulates it on any x86-64 host.
EMULATED_CPU = "Nehalem"


def smoke_test(
    binary: Path,
    model: Path,
    log_path: Path,
    *,
    timeout_s: float = 180.0,
    launcher: Sequence[str] = (),
    cpu: str = _HERE,
) -> str:
    """Start ``binary`` on ``model``, generate one token, stop it; a one-line summary on success.

    ``launcher`` prefixes the command (an emulator; ``cpu`` then names the CPU it emulates). Raises
    ``InstallError`` with one line (how the server died, its last log line, the log's path) if it
    exits, fails to answer, or is not healthy within ``timeout_s``.
    """
    port = _free_port()
    command = [
        *launcher, str(binary), "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
        "--threads", "1", "--ctx-size", "256", "--parallel", "1", "--no-webui",
    ]  # fmt: skip
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(timeout=60.0) as client:
            _wait_healthy(client, base, process, log_path, started + timeout_s, cpu)
            try:
                reply = client.post(f"{base}/completion", json={"prompt": "Hello", "n_predict": 1})
            except httpx.HTTPError as exc:
                raise _failure(
                    process, log_path, f"generating a token failed ({type(exc).__name__})", cpu
                ) from None
            if reply.status_code != 200 or "content" not in reply.json():
                raise _failure(
                    process, log_path, f"generating a token answered HTTP {reply.status_code}", cpu
                )
        took = time.monotonic() - started
        return f"smoke test passed on {cpu} ({model.name}: loaded and generated a token in {took:.1f}s)"
    finally:
        _stop(process)


def emulated_smoke_test(binary: Path, model: Path, log_path: Path, *, cpu: str = EMULATED_CPU) -> str:
    """``smoke_test`` under ``qemu-x86_64 -cpu <cpu>``: the build runs as on that older CPU.

    A native build's AVX-512 or AVX2 code dies there with SIGILL, reported in one line. On a machine
    that is not x86-64 this says so and checks nothing; without qemu-user it raises ``InstallError``.
    """
    if platform.machine() not in {"x86_64", "AMD64"}:
        machine = platform.machine()
        return f"not checked on an emulated older CPU (the check emulates x86-64; this is {machine})"
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        raise InstallError(
            "a portable llama-server is checked on an emulated older CPU and qemu-x86_64 is not installed "
            "(Debian/Ubuntu: apt-get install qemu-user)"
        )
    # Emulated, loading and one token take 10-40x longer than natively.
    return smoke_test(
        binary, model, log_path, timeout_s=900.0, launcher=[qemu, "-cpu", cpu], cpu=f"an emulated {cpu} CPU"
    )


def _wait_healthy(
    client: httpx.Client,
    base: str,
    process: subprocess.Popen[bytes],
    log_path: Path,
    deadline: float,
    cpu: str,
) -> None:
    while True:
        if process.poll() is not None:
            raise _failure(process, log_path, "it exited while loading the model", cpu)
        with contextlib.suppress(httpx.HTTPError):
            if client.get(f"{base}/health").status_code == 200:
                return
        if time.monotonic() > deadline:
            raise _failure(process, log_path, "it was not healthy in time", cpu)
        time.sleep(0.2)


def _failure(process: subprocess.Popen[bytes], log_path: Path, what: str, cpu: str) -> InstallError:
    code = process.poll()
    if code is None:  # an answer failed while it still runs: give it a moment to finish dying
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = process.wait(timeout=2.0)
    how = describe_exit(code) if code is not None else "still running"
    if code == -signal.SIGILL:
        how += f": {_SIGILL_HINT.format(cpu=cpu)}"
    on = "" if cpu == _HERE else f" on {cpu}"
    return InstallError(
        f"llama-server failed its smoke test{on}: {what}; {how}; last log line: {last_log_line(log_path)!r} "
        f"(see {log_path})"
    )


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
