"""A real Arize Phoenix server (an OTLP/HTTP receiver that stores GenAI spans) for the tracing tests.

Phoenix pins anthropic<2 and openai>=3, which the test extra's clients cannot share, so it lives in
its own virtualenv (scripts/setup.sh: ``.venv-phoenix``, ``arize-phoenix`` pinned there);
``$CASCADE_PHOENIX`` names another ``phoenix`` executable. ``PhoenixLaunch(tmp)`` starts one on
private loopback ports with its working directory (its SQLite database) under ``tmp``, ready when
its ``/healthz`` answers; ``Phoenix.spans(trace_id)`` reads a trace back through its REST API.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

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


class PhoenixLaunch:
    """A Phoenix server started on free loopback ports, its data under ``tmp``, not yet waited for.

    Its start is slow (a minute or more on 2 busy cores: imports and its database's migrations), so
    the suite starts it when a test that needs it is collected (tests/conftest.py) and the tests
    wait for it only when they first use it: the start overlaps the tests that run before them.
    """

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        port, grpc_port = free_port(), free_port()
        env = {
            **os.environ,
            "PHOENIX_WORKING_DIR": str(tmp),
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(port),
            "PHOENIX_GRPC_PORT": str(grpc_port),
            "PHOENIX_TELEMETRY_ENABLED": "false",
        }
        self.url = f"http://127.0.0.1:{port}"
        self._log = (tmp / "phoenix.log").open("wb")
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            [str(phoenix_executable()), "serve"], env=env, stdout=self._log, stderr=self._log, cwd=tmp
        )
        self._ready: Phoenix | None = None

    def ready(self, timeout_s: float = 300.0) -> Phoenix:
        """The server once its ``/healthz`` answers (polled: its readiness is the event waited for)."""
        while self._ready is None:
            if _healthy(self.url):
                self._ready = Phoenix(self.url, self.process, time.monotonic() - self.started)
                break
            if self.process.poll() is not None or time.monotonic() - self.started > timeout_s:
                tail = (self.tmp / "phoenix.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"Phoenix did not start (exit {self.process.returncode}):\n{tail}")
            time.sleep(0.2)
        return self._ready

    def stop(self) -> None:
        """Terminate the server (killed if it does not exit within 20 s)."""
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


_LAUNCH = pytest.StashKey[PhoenixLaunch]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start Phoenix in the background as soon as a collected test asks for it (see PhoenixLaunch)."""
    if any("phoenix" in getattr(item, "fixturenames", ()) for item in session.items):
        tmp = Path(tempfile.mkdtemp(prefix="cascade-phoenix-"))
        session.config.stash[_LAUNCH] = PhoenixLaunch(tmp)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop the suite's Phoenix, if one was started, and remove its data."""
    launch = session.config.stash.get(_LAUNCH, None)
    if launch is not None:
        launch.stop()
        shutil.rmtree(launch.tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def phoenix(request: pytest.FixtureRequest) -> Phoenix:
    """The suite's Phoenix, ready (started at collection; one server for every tracing test)."""
    launch = request.config.stash.get(_LAUNCH, None)
    if launch is None:  # collected otherwise (e.g. by name at run time): start it now
        launch = request.config.stash[_LAUNCH] = PhoenixLaunch(
            Path(tempfile.mkdtemp(prefix="cascade-phoenix-"))
        )
    server = launch.ready()
    print(f"\nPhoenix ready {server.started_s:.1f} s after its start")
    return server
