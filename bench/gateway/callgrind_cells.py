"""Counting a running server's instructions under valgrind's callgrind: the pieces the
``*_instructions.py`` benches share (one definition each).

A server runs under callgrind (``callgrind_serve``: ``cascade serve``; ``callgrind_passthrough``:
the passthrough floor, bench/gateway/passthrough_app.py); a measured window zeroes its counters
(``callgrind_control -z``), runs wrk, dumps them (``-d``) and reads the dump's ``summary`` line
(``instructions``): user-space instructions of the whole process, all threads. An idle window
(``idle_window``: the same zero, a sleep instead of wrk, the same dump) measures the server's
background work per second (timers, health checks), which a row subtracts over its own window
(``net_per_request``) so that a row serving fewer requests does not read high.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from run_bench import REPO, free_port, passthrough_command, process, run_wrk, wait_http

# Under callgrind the interpreter's start-up imports take about a minute (more on a busy machine).
START_TIMEOUT_S = 900


def _valgrind(cpu: str, out_dir: Path) -> list[str]:
    return [
        "taskset",
        "-c",
        cpu,
        "valgrind",
        "--tool=callgrind",
        "--dump-instr=no",
        f"--callgrind-out-file={out_dir}/callgrind.%p",
    ]


@contextlib.contextmanager
def callgrind_serve(
    config: Path, out_dir: Path, cpu: str, pythonpath: str | None = None, log_name: str = "serve"
) -> Iterator[tuple[str, int]]:
    """``cascade serve`` under callgrind, pinned to ``cpu``; yields (base URL, pid).

    ``pythonpath``: the code to run (a ``git archive`` export, say); None: the caller's environment.
    CASCADE_* variables of the calling shell are dropped (the config says everything).
    """
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    cascade = str(Path(sys.executable).with_name("cascade"))
    serve = [sys.executable, cascade, "serve", "--config", str(config), "--port", str(port)]
    with process(_valgrind(cpu, out_dir) + serve, env=env, log=out_dir / f"{log_name}.log") as server:
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/healthz", timeout_s=START_TIMEOUT_S)
        yield base, server.pid


@contextlib.contextmanager
def callgrind_passthrough(upstream: str, out_dir: Path, cpu: str) -> Iterator[tuple[str, int]]:
    """The passthrough floor (bench/gateway/passthrough_app.py) under callgrind; yields (URL, pid)."""
    port = free_port()
    env = {**os.environ, "UPSTREAM": upstream, "PYTHONPATH": str(REPO)}
    cmd = _valgrind(cpu, out_dir) + passthrough_command(port)
    with process(cmd, env=env, log=out_dir / "passthrough.log") as server:
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        wait_http(url, timeout_s=START_TIMEOUT_S, method="POST", body={"model": "x", "messages": []})
        yield url, server.pid


def zero(pid: int) -> None:
    """Zero the counters of the callgrind process ``pid``."""
    subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)


def dump(pid: int) -> None:
    """Dump the counters of the callgrind process ``pid`` (a new ``callgrind.<pid>.<n>`` file)."""
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)


def instructions(out_dir: Path, pid: int) -> int:
    """Zero-to-dump instructions: the ``summary`` line of the newest dump of ``pid``."""
    dumps = sorted(out_dir.glob(f"callgrind.{pid}.*"), key=lambda p: p.stat().st_mtime)
    if not dumps:
        raise RuntimeError(f"no callgrind dump in {out_dir}")
    match = re.search(r"^summary:\s+(\d+)", dumps[-1].read_text(errors="replace"), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"{dumps[-1]}: no summary line")
    return int(match.group(1))


def failed_requests(result: dict[str, Any]) -> int:
    """wrk's failed requests: non-2xx answers and connection, read and timeout errors."""
    return int(result["non_2xx"] + result["connect_errors"] + result["read_errors"] + result["timeouts"])


def counted_wrk(
    url: str,
    request: dict[str, Any],
    pid: int,
    out_dir: Path,
    args: Any,
    api_key: str = "",
) -> tuple[dict[str, Any], int]:
    """A warm-up of ``args.warmup`` s, then ``args.seconds`` s of wrk (``args.connections``
    clients) between a zero and a dump of the counters; (wrk's result with ``window_s``, the
    zero-to-dump seconds, instructions). Raises when a request failed: a count over failed
    requests measures another path."""
    run_wrk(url, request, args.connections, args.warmup, args.client_cpu, api_key)
    time.sleep(1)  # the warm-up's last responses finish before the counters are zeroed
    zero(pid)
    started = time.monotonic()
    result = run_wrk(url, request, args.connections, args.seconds, args.client_cpu, api_key)
    dump(pid)
    result["window_s"] = time.monotonic() - started
    bad = failed_requests(result)
    if bad:
        raise RuntimeError(f"{url}: {bad} failed requests: {result}")
    return result, instructions(out_dir, pid)


def idle_window(pid: int, out_dir: Path, seconds: float) -> dict[str, float]:
    """The server's instructions per second without requests: ``seconds`` between a zero and a
    dump, as a counted window has; {"seconds", "instructions_per_s"}."""
    time.sleep(1)  # the last responses before the window finish outside it
    zero(pid)
    started = time.monotonic()
    time.sleep(seconds)
    dump(pid)
    elapsed = time.monotonic() - started
    return {"seconds": elapsed, "instructions_per_s": instructions(out_dir, pid) / elapsed}


def net_per_request(total: int, requests: int, window_s: float, idle_per_s: float) -> float:
    """Instructions per request net of the background: the idle rate times the window subtracted."""
    return (total - idle_per_s * window_s) / requests
