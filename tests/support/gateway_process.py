"""``cascade serve`` in a subprocess: the one gateway process the tests start.

``GatewayProcess(config_path, env=..., log_path=...)``: ``start()`` then ``wait_ready()``; ``url``,
``client(api_key)`` (official OpenAI SDK, no retries), ``get(path)``, ``metrics()`` (parsed with
prometheus_client's parser), ``sample(name, **labels)``, ``terminate()`` (SIGTERM, as an orchestrator
does), ``kill()``, ``wait(timeout)``, ``stop()``, ``returncode``, ``log_text()``, ``logs()`` (its
JSON log lines), ``request_logs()``, ``plain_lines()`` (the lines that are not JSON), and
``rss_bytes()`` and ``open_fds()`` (from /proc, for soaks). The process gets a clean environment:
every inherited ``CASCADE_*`` variable but ``CASCADE_HOME`` is dropped, then ``env`` is applied.
Its stdout and stderr go to one log file. Subclasses (the streaming, policy-push and learning
tests' replicas) add what their tests read.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import orjson
from openai import AsyncOpenAI, OpenAI
from prometheus_client.parser import text_string_to_metric_families

from tests.support.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


class GatewayProcess:
    """One ``cascade serve`` replica in a subprocess; see the module docstring."""

    def __init__(
        self,
        config_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        log_path: Path | None = None,
    ):
        self.config_path = config_path
        self.port = port or free_port()
        self.env = dict(env or {})
        self.log_path = log_path or config_path.with_name(f"gateway-{self.port}.log")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The process id."""
        assert self.proc is not None
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        """Exit status once it has exited, else None."""
        return None if self.proc is None else self.proc.poll()

    def start(self) -> GatewayProcess:
        """Spawn ``cascade serve --config ... --port ...`` (returns at once; see ``wait_ready``)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
        if "CASCADE_HOME" in os.environ:
            env["CASCADE_HOME"] = os.environ["CASCADE_HOME"]
        env.update(self.env)
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cascade_cli.main",
                "serve",
                "--config",
                str(self.config_path),
                "--port",
                str(self.port),
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        return self

    def wait_ready(self, timeout_s: float = 90.0, path: str = "/healthz") -> GatewayProcess:
        """Wait until ``path`` answers 200 (fails with the log if the process exits first)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.returncode is not None:
                raise RuntimeError(f"gateway exited with {self.returncode}:\n{self.log_text()[-4000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + path, timeout=1).status_code == 200:
                    return self
            time.sleep(0.05)
        raise RuntimeError(f"gateway not ready on {self.url}{path}:\n{self.log_text()[-4000:]}")

    def client(self, api_key: str = "none", timeout_s: float = 30.0, **kw: Any) -> OpenAI:
        """Official sync SDK client (no retries)."""
        return OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, timeout=timeout_s, **kw)

    def async_client(self, api_key: str = "none", timeout_s: float = 30.0, **kw: Any) -> AsyncOpenAI:
        """Official async SDK client (no retries)."""
        return AsyncOpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, timeout=timeout_s, **kw)

    def get(self, path: str, **kw: Any) -> httpx.Response:
        """GET ``path`` on this replica."""
        return httpx.get(self.url + path, timeout=kw.pop("timeout", 5), **kw)

    def metrics(self) -> dict[str, Any]:
        """``/metrics`` parsed with prometheus_client.parser: family name -> family."""
        text = self.get("/metrics").text
        return {family.name: family for family in text_string_to_metric_families(text)}

    def sample(self, name: str, **labels: str) -> float:
        """Value of one sample (0.0 when absent); ``name`` is the full sample name."""
        for family in self.metrics().values():
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return float(sample.value)
        return 0.0

    def terminate(self) -> None:
        """SIGTERM (graceful shutdown), without waiting."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def wait(self, timeout_s: float = 30.0) -> int:
        """Wait for exit; the exit status."""
        assert self.proc is not None
        return self.proc.wait(timeout_s)

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after ``grace_s`` (teardown)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.terminate()
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def logs(self) -> list[dict[str, Any]]:
        """The JSON log lines written so far, parsed."""
        return [orjson.loads(line) for line in self._lines() if line.startswith(b"{")]

    def request_logs(self) -> list[dict[str, Any]]:
        """The per-request (``event: request``) log lines written so far."""
        return [line for line in self.logs() if line.get("event") == "request"]

    def plain_lines(self) -> list[str]:
        """The output lines that are not JSON (the CLI's start banner; anything else is a defect)."""
        return [line.decode() for line in self._lines() if line.strip() and not line.startswith(b"{")]

    def _lines(self) -> list[bytes]:
        try:
            return self.log_path.read_bytes().splitlines()
        except OSError:
            return []

    def log_text(self) -> str:
        """Everything the process wrote to stdout/stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def rss_bytes(self) -> int:
        """Resident set size, from /proc/<pid>/status."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def open_fds(self) -> int:
        """Number of open file descriptors, from /proc/<pid>/fd."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))
