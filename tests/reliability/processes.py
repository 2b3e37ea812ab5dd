"""Real processes for reliability tests: a private redis-server and `cascade serve` replicas.

Nothing here is a double: ``RedisServer`` runs the installed ``redis-server`` binary on its own free
loopback port (no persistence: a restart loses every key, like a wiped Redis), and
``GatewayProcess`` runs the real ``cascade serve`` command in a subprocess, in front of the
scripted upstream (tests/support/scripted_upstream.py, the fault-injecting seam double).

* ``RedisServer()``: ``start()``, ``kill()`` (SIGKILL: an outage), ``restart()`` (start again on the
  same port, empty), ``freeze()``/``thaw()`` (SIGSTOP/SIGCONT: a Redis that accepts connections but
  never answers), ``stop()``; ``url``, ``client()`` (sync redis-py, short timeouts).
* ``write_gateway_config(directory, upstream_base_url=..., policy=..., redis_url=..., **changes)``:
  a gateway YAML (models ``small``/``medium``/``large`` -> ``up-small``/... with the per-token
  prices ``PRICES``) and returns its path; ``changes`` replace top-level config sections.
* ``GatewayProcess(config_path, env=..., log_path=...)``: ``start()`` then ``wait_ready()``;
  ``url``, ``client(api_key)`` (official OpenAI SDK, no retries), ``get(path)``, ``metrics()``
  (parsed with prometheus_client's parser), ``sample(name, **labels)``, ``terminate()``
  (SIGTERM, as an orchestrator does), ``kill()``, ``wait(timeout)``, ``returncode``, ``log_text()``,
  ``rss_bytes()`` and ``open_fds()`` (from /proc, for soaks).
* ``true_cost_usd(produced)``: what the scripted upstream's answers cost at ``PRICES``; the
  reference every spend counter is checked against.
* ``spend_counter_nano(client, api_key)``: a key's spend counter(s) in Redis, in nano-USD.

Processes get a clean environment: every inherited ``CASCADE_*`` variable is dropped, then ``env``
is applied (e.g. ``CASCADE_API_KEYS``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import httpx
import redis
import yaml
from openai import AsyncOpenAI, OpenAI
from prometheus_client.parser import text_string_to_metric_families

from tests.support.ports import free_port
from tests.support.scripted_upstream import Produced

REPO_ROOT = Path(__file__).resolve().parents[2]

# USD per million tokens of the test models (per-token everywhere, so every cost is token-exact).
PRICES: dict[str, tuple[float, float]] = {
    "small": (0.5, 1.0),
    "medium": (2.0, 4.0),
    "large": (10.0, 30.0),
}
UPSTREAM_IDS = {name: f"up-{name}" for name in PRICES}
NANO_PER_USD = 1_000_000_000


def true_cost_usd(produced: Iterable[Produced]) -> float:
    """Price of the upstream's answers at ``PRICES`` (by upstream model id)."""
    by_id = {up: PRICES[name] for name, up in UPSTREAM_IDS.items()}
    total = 0.0
    for item in produced:
        input_price, output_price = by_id[item.model or ""]
        total += (item.prompt_tokens * input_price + item.completion_tokens * output_price) / 1e6
    return total


def key_id(api_key: str) -> str:
    """The gateway's key_id of a client key (first 16 hex digits of its SHA-256)."""
    return hashlib.sha256(api_key.encode()).hexdigest()[:16]


def spend_counter_nano(client: redis.Redis, api_key: str, prefix: str = "cascade") -> int:
    """Sum of a key's spend counters (every window) in Redis, nano-USD."""
    total = 0
    for name in client.scan_iter(match=f"{prefix}:spend:{key_id(api_key)}:*"):
        text = name.decode() if isinstance(name, bytes) else name
        if text.rsplit(":", 1)[-1].isdigit() and client.type(name) in (b"string", "string"):
            total += int(client.get(name) or 0)
    return total


class RedisServer:
    """A private redis-server on its own port; see the module docstring."""

    def __init__(self, port: int | None = None, binary: str = "redis-server"):
        self.port = port or free_port()
        self.binary = binary
        self.proc: subprocess.Popen[bytes] | None = None
        self.frozen = False

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> None:
        """Start (empty) and wait until it answers PING."""
        no_persistence = ["--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", *no_persistence],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.frozen = False
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with contextlib.closing(self.client()) as client:
                    client.ping()
                return
            except redis.RedisError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server on port {self.port} did not start") from None
                time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL: Redis is gone (connections reset, data lost)."""
        if self.proc is not None:
            if self.frozen:
                self.thaw()
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def restart(self) -> None:
        """Kill if running, then start again on the same port with no data."""
        self.kill()
        self.start()

    def freeze(self) -> None:
        """SIGSTOP: connections are accepted by the kernel but nothing is answered."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        """SIGCONT: resume (commands that arrived meanwhile are then executed)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
        self.frozen = False

    def stop(self) -> None:
        """Stop for good (test teardown)."""
        self.kill()

    def client(self) -> redis.Redis:
        """A synchronous client with short timeouts (tests must not hang on a frozen server)."""
        return redis.Redis.from_url(self.url, socket_timeout=2, socket_connect_timeout=2)


def model_configs(upstream_base_url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """The test models at ``PRICES``, all served by the scripted upstream."""
    return {
        name: {
            "base_url": upstream_base_url,
            "model": UPSTREAM_IDS[name],
            "timeout_s": timeout_s,
            "max_retries": 1,
            "price": {"input_per_mtok": PRICES[name][0], "output_per_mtok": PRICES[name][1]},
        }
        for name in PRICES
    }


def write_gateway_config(
    directory: Path,
    *,
    upstream_base_url: str,
    policy: Path | str,
    redis_url: str | None = None,
    name: str = "gateway.yaml",
    **changes: Any,
) -> Path:
    """A gateway YAML config against the scripted upstream; ``changes`` replace top-level sections."""
    document: dict[str, Any] = {
        "models": model_configs(upstream_base_url),
        "policy": str(policy),
        "redis_url": redis_url,
        "limits": {"max_body_bytes": 1_048_576, "request_timeout_s": 30},
        "logging": {"level": "info"},
    }
    document.update(changes)
    path = directory / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


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
