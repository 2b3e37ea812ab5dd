"""``cascade demo`` as a child process for e2e tests: the local pool and a gateway serving a policy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.support.ports import free_port


def pool_env(repo_root: Path) -> dict[str, str]:
    """The environment of the demo and of ``cascade replay``: the pool in ``$CASCADE_HOME`` or the repo's."""
    home = os.environ.get("CASCADE_HOME") or str(repo_root / ".cascade")
    return {**os.environ, "CASCADE_HOME": home}


def _wait_ready(url: str, demo: subprocess.Popen[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if demo.poll() is not None:
            pytest.fail(f"cascade demo exited early (code {demo.returncode}): {demo.stderr.read()}")  # type: ignore[union-attr]
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    pytest.fail(f"the demo gateway was not ready at {url} within {timeout_s:.0f} s")


@contextmanager
def running_demo(repo_root: Path, policy_file: Path, timeout_s: float = 600) -> Iterator[str]:
    """Run ``cascade demo --policy policy_file`` on a free port until the block ends; yields its URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    demo = subprocess.Popen(
        [sys.executable, "-m", "cascade_cli.main", "demo", "--port", str(port), "--policy", str(policy_file)],
        cwd=repo_root,
        env=pool_env(repo_root),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_ready(url, demo, timeout_s=timeout_s)
        yield url
    finally:
        demo.send_signal(signal.SIGTERM)
        try:
            demo.wait(timeout=60)
        except subprocess.TimeoutExpired:
            demo.kill()
            demo.wait()
