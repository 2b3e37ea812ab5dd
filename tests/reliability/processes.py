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
* ``GatewayProcess`` (tests/support/gateway_process.py, the one `cascade serve` subprocess of the
  tests): ``start()`` then ``wait_ready()``.
* ``true_cost_usd(produced)``: what the scripted upstream's answers cost at ``PRICES``; the
  reference every spend counter is checked against.
* ``spend_counter_nano(client, api_key)``: a key's spend counter(s) in Redis, in nano-USD.

Processes get a clean environment: every inherited ``CASCADE_*`` variable is dropped, then ``env``
is applied (e.g. ``CASCADE_API_KEYS``).
"""

from __future__ import annotations

import contextlib
import hashlib
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import redis
import yaml

from tests.support.ports import free_port
from tests.support.scripted_upstream import Produced

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
            "retry": {"base_s": 0.001},  # retries back off from 1 ms: the default 0.5 s would slow tests
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
