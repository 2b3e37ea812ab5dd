"""Real processes for the policy reliability tests: `cascade serve` replicas sharing the real Redis.

* ``Replica``: one `cascade serve` process whose policy is in Redis under a private key prefix
  (``CASCADE_REDIS_PREFIX``), with an admin key; ``ready()``, ``details()``, ``ask()``, ``stop()``.
* ``make_policy(threshold)``: a valid, stamped policy for the models ``small`` and ``large``.
* ``wipe(keys)``: what Redis losing its data looks like to one deployment (every key of the prefix).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from gateway.redis.keys import RedisKeys
from policies import Policy, build_policy
from tests.support.gateway_process import GatewayProcess
from tests.support.policy_files import two_model_document
from tests.support.shared_redis import REDIS_URL

REPO = Path(__file__).resolve().parents[2]
CASCADE = str(Path(sys.executable).with_name("cascade"))
ADMIN_KEY = "sk-reliability-admin"
DEEP_JSON = "[" * 100_000 + "]" * 100_000


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll ``condition`` every 50 ms; seconds it took, or AssertionError naming ``what``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"{what}: not within {timeout_s}s")
        time.sleep(0.05)
    return time.monotonic() - started


def make_policy(threshold: float) -> Policy:
    """A valid policy over ``small`` -> ``large`` whose id depends on ``threshold``."""
    document = two_model_document(
        threshold,
        small_cost_usd=0.00001,
        max_cost_usd=0.0005,
        expected_cost_usd=0.0004,
        scorer={"name": "mean_token_negentropy", "top_k": 5},
        envelope=True,
    )
    return build_policy(document)


class Replica(GatewayProcess):
    """One `cascade serve` process serving the policy in Redis under ``keys.prefix``, listening."""

    def __init__(self, work: Path, upstream_url: str, keys: RedisKeys, name: str, **config: Any):
        model = {"base_url": upstream_url, "timeout_s": 5, "max_retries": 0}
        document = {
            "models": {
                "small": {**model, "model": "small", "price": {"per_query_usd": 0.0001}},
                "large": {**model, "model": "large", "price": {"per_query_usd": 0.001}},
            },
            "policy": REDIS_URL,
            "auth": {"open": True},
            "logging": {"level": "info"},
            **config,
        }
        config_path = work / f"{name}.yaml"
        config_path.write_text(yaml.safe_dump(document))
        env = {"CASCADE_REDIS_PREFIX": keys.prefix, "CASCADE_ADMIN_KEY": ADMIN_KEY}
        super().__init__(config_path, env=env, log_path=work / f"{name}.log")
        self.start()
        try:
            # Listening is enough: a replica may start without a loadable policy (not ready).
            wait_for(self._alive_and_listening, 30, f"replica {name} listening")
        except AssertionError:
            self.stop()
            raise

    def _alive_and_listening(self) -> bool:
        if self.returncode is not None:
            raise AssertionError(f"cascade serve exited {self.returncode}: {self.log()}")
        return _answers(self.url + "/healthz")

    def ready(self) -> httpx.Response:
        """``GET /readyz`` as an anonymous caller (what a load balancer sees)."""
        return httpx.get(self.url + "/readyz", timeout=5)

    def details(self) -> dict[str, Any]:
        """``GET /readyz`` with the admin key: policy id, reload failures, last error, ..."""
        response = httpx.get(self.url + "/readyz", headers=admin_headers(), timeout=5)
        return dict(response.json())

    def policy_id(self) -> str | None:
        """The policy id this replica serves now."""
        return self.details().get("policy_id")

    def ask(self, api_key: str = "none") -> httpx.Response:
        """One cascade chat completion."""
        return httpx.post(
            self.url + "/v1/chat/completions",
            json={"model": "cascade", "messages": [{"role": "user", "content": "What is 2+2?"}]},
            headers={"authorization": f"Bearer {api_key}"},
            timeout=10,
        )

    def metric(self, name: str) -> float:
        """The value of an unlabelled sample in ``/metrics`` (0.0 when absent)."""
        for family in self.metrics().values():
            for sample in family.samples:
                if sample.name == name and not sample.labels:
                    return float(sample.value)
        return 0.0

    def log(self) -> str:
        """Everything the process wrote so far."""
        return self.log_text()

    def alive(self) -> bool:
        """The process is still running."""
        return self.returncode is None


def admin_headers() -> dict[str, str]:
    """The Authorization header of the replicas' admin key."""
    return {"authorization": f"Bearer {ADMIN_KEY}"}


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
