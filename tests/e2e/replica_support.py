"""Real processes and stores for tests/e2e/test_learning_two_replicas.py.

* ``Replica(config, env, log)``: one `cascade serve` subprocess on a free loopback port;
  ``wait_ready()``, ``client()`` (the openai SDK, no retries), ``metrics()`` (a parsed scrape),
  ``served_policy(admin_key)`` (the admin view), ``stop()`` (SIGTERM, then SIGKILL).
* ``cli(*args, env=...)``: a `cascade` command in a subprocess, bounded in time.
(The real Redis and PostgreSQL of the test machine, and reading a traffic store: tests/support/.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
from learning_e2e_support import parse_metrics
from openai import OpenAI

from tests.support.gateway_process import GatewayProcess

Samples = list[tuple[str, dict[str, str], float]]


def cli(
    *args: str, env: dict[str, str] | None = None, timeout_s: float = 300
) -> subprocess.CompletedProcess[str]:
    """``cascade ARGS`` with this interpreter, ``env`` over the current environment."""
    return subprocess.run(
        [sys.executable, "-m", "cascade_cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, **(env or {})},
    )


class Replica(GatewayProcess):
    """One `cascade serve` process on a free port (tests/support/gateway_process.py), whose output
    goes to ``log``, with the environment ``env`` and the learning test's readers."""

    def __init__(self, config: Path, env: dict[str, str], log: Path, client_timeout_s: float = 300) -> None:
        """Start it (returns at once; see ``wait_ready``)."""
        super().__init__(config, env=env, log_path=log)
        self.log = log
        self.client_timeout_s = client_timeout_s
        log.unlink(missing_ok=True)  # the replica's own output only
        self.start()

    def wait_ready(self, timeout_s: float = 90, path: str = "/readyz") -> Replica:
        """Until /readyz answers 200 (the policy is loaded); fails with the log if it exits first."""
        super().wait_ready(timeout_s, path)
        return self

    def client(self) -> OpenAI:
        """The openai SDK against this replica (no retries: every request sent is one counted)."""
        return super().client("unused", timeout_s=self.client_timeout_s)

    def metrics(self) -> Samples:
        """A scrape of /metrics, parsed by prometheus_client."""
        return parse_metrics(httpx.get(f"{self.url}/metrics", timeout=10).text)

    def served_policy(self, admin_key: str) -> str | None:
        """The policy id the admin view (GET /admin/policy) reports."""
        headers = {"Authorization": f"Bearer {admin_key}"}
        response = httpx.get(f"{self.url}/admin/policy", headers=headers, timeout=10)
        response.raise_for_status()
        policy_id = response.json()["policy_id"]
        return None if policy_id is None else str(policy_id)

    def log_tail(self, chars: int = 5000) -> str:
        """The end of the process's output."""
        return self.log_text()[-chars:]

    def stop(self, grace_s: float = 60) -> None:
        """SIGTERM (the shutdown grace ends the sampler), SIGKILL if it has not exited in time."""
        super().stop(grace_s)
