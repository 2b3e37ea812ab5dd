"""A real Arize Phoenix server (an OTLP/HTTP receiver that stores GenAI spans) for the tracing tests.

Phoenix pins anthropic<2 and openai>=3, which the test extra's clients cannot share, so it lives in
its own virtualenv (scripts/setup.sh: ``.venv-phoenix``, ``arize-phoenix`` pinned there);
``$CASCADE_PHOENIX`` names another ``phoenix`` executable. ``phoenix_server(tmp)`` runs one on
private loopback ports with its working directory (its SQLite database) under ``tmp``, ready when
its ``/healthz`` answers; ``Phoenix.spans(trace_id)`` reads a trace back through its REST API.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.ports import free_port

REPO = Path(__file__).resolve().parents[2]
PHOENIX_PIN = "arize-phoenix==20.26.1"


def phoenix_executable() -> Path:
    """The ``phoenix`` command: ``$CASCADE_PHOENIX``, else the repository's ``.venv-phoenix``."""
    path = Path(os.environ.get("CASCADE_PHOENIX") or REPO / ".venv-phoenix" / "bin" / "phoenix")
    if not path.exists():
        raise RuntimeError(
            f"no Phoenix at {path}: run scripts/setup.sh (it installs {PHOENIX_PIN} into .venv-phoenix)"
        )
    return path


@dataclass
class Phoenix:
    """A running Phoenix: its base URL, OTLP/HTTP traces endpoint and start time."""

    url: str
    process: subprocess.Popen[bytes]
    started_s: float

    @property
    def traces_endpoint(self) -> str:
        return self.url + "/v1/traces"

    def spans(self, trace_id: str | None = None) -> list[dict[str, Any]]:
        """The stored spans of the default project (of one trace, if given), as its REST API returns them."""
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
            response = httpx.get(f"{self.url}/v1/projects/default/spans", params=params, timeout=10)
            response.raise_for_status()
            page = response.json()
            found += [s for s in page["data"] if trace_id is None or s["context"]["trace_id"] == trace_id]
            cursor = page.get("next_cursor")
            if not cursor:
                return found


@contextmanager
def phoenix_server(tmp: Path, timeout_s: float = 300.0) -> Iterator[Phoenix]:
    """Phoenix on free loopback ports, its data under ``tmp``; stopped on exit."""
    port, grpc_port = free_port(), free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(tmp),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = (tmp / "phoenix.log").open("wb")
    started = time.monotonic()
    process = subprocess.Popen([str(phoenix_executable()), "serve"], env=env, stdout=log, stderr=log, cwd=tmp)
    url = f"http://127.0.0.1:{port}"
    try:
        while not _healthy(url):
            if process.poll() is not None or time.monotonic() - started > timeout_s:
                tail = (tmp / "phoenix.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"Phoenix did not start (exit {process.returncode}):\n{tail}")
            time.sleep(0.2)  # polling its health endpoint: the readiness is the event waited for
        yield Phoenix(url, process, time.monotonic() - started)
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
