"""The shipped deploy/tools/scripted_upstream.py as a process: what the deploy examples run against
(an OpenAI-compatible upstream answering at once; prompts with "hard" are unconfident)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.support.ports import free_port

DEPLOY_UPSTREAM = Path(__file__).resolve().parents[2] / "deploy" / "tools" / "scripted_upstream.py"


@contextlib.contextmanager
def running_deploy_upstream(timeout_s: float = 20.0) -> Iterator[str]:
    """The deploy upstream on a free loopback port for the block; yields its /v1 base URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(DEPLOY_UPSTREAM), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_healthy(f"http://127.0.0.1:{port}/health", process, timeout_s)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(10)


def _wait_healthy(url: str, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the deploy scripted upstream exited with {process.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code == 200:
                return
        time.sleep(0.05)
    raise AssertionError(f"the deploy scripted upstream did not answer {url} within {timeout_s}s")
