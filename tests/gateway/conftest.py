"""Gateway test fixtures: a scripted upstream on loopback and the real app under uvicorn.

Reusable pieces (import-free: they are fixtures):

* ``upstream``: the session's ``ScriptedUpstream`` (see scripted_upstream.py), reset for each test.
  ``upstream.script("up-small", ok(confidence=0.2), error(503))`` queues replies per upstream model id.
* ``write_policy(path=None, **changes)``: writes a valid policy (tiers below) and returns its path;
  ``changes`` replace top-level policy fields (e.g. ``allow_degraded=False``, ``tiers={...}``).
* ``make_settings(policy=..., **changes)``: a ``Settings`` whose models point at the upstream:
  ``small`` -> ``up-small``, ``medium`` -> ``up-medium``, ``large`` -> ``up-large``
  (``changes`` replace top-level config fields, e.g. ``redis_url=...`` or ``models=...``).
* ``start_gateway(settings=None, rng=None)``: runs ``create_app(settings)`` under uvicorn (uvloop,
  httptools) in a background thread on a free port; returns a ``RunningGateway`` with ``url``,
  ``app``, ``gateway`` (the app's Gateway), ``client()``/``async_client()`` (official OpenAI SDK,
  no retries) and ``metrics()`` (parsed with prometheus_client.parser). Stopped after the test.
* ``gateway``: ``start_gateway()`` with the default settings and policy.

Default policy tiers (threshold 0.5 on mean token negentropy, top_k 5): ``balanced`` (default):
small -> large; ``chain``: small -> medium -> large; ``direct``: large only; ``mix``: 50/50 of
small -> large and large. Scripted ``ok(confidence=0.99)`` scores ~0.96 (accepted), ``ok(confidence=0.3)``
scores ~0.1 (escalated).
"""

from __future__ import annotations

import asyncio
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from openai import AsyncOpenAI, OpenAI
from prometheus_client.parser import text_string_to_metric_families
from scripted_upstream import ScriptedUpstream

from gateway.app import create_app
from gateway.config import Settings
from policies import build_policy, save_policy

POLICY_DOCUMENT: dict[str, Any] = {
    "schema_version": 1,
    "scorer": {"name": "mean_token_negentropy", "top_k": 5},
    "models": {
        "small": {"mean_cost_usd": 0.00001, "quality": 0.5},
        "medium": {"mean_cost_usd": 0.0001, "quality": 0.6},
        "large": {"mean_cost_usd": 0.001, "quality": 0.8},
    },
    "default_tier": "balanced",
    "tiers": {
        "balanced": {
            "objective": {"max_cost_usd": 0.0005},
            "routes": [{"weight": 1.0, "models": ["small", "large"], "thresholds": [0.5]}],
            "expected": {"cost_usd": 0.0004, "quality": 0.7, "escalation_rate": 0.4},
            "shadow_price": 100.0,
        },
        "chain": {
            "objective": {"max_cost_usd": 0.0008},
            "routes": [{"weight": 1.0, "models": ["small", "medium", "large"], "thresholds": [0.5, 0.5]}],
            "expected": {"cost_usd": 0.0005, "quality": 0.72, "escalation_rate": 0.5},
        },
        "direct": {
            "objective": {"min_quality": 0.8},
            "routes": [{"weight": 1.0, "models": ["large"], "thresholds": []}],
            "expected": {"cost_usd": 0.001, "quality": 0.8, "escalation_rate": 0.0},
        },
        "mix": {
            "objective": {"max_cost_usd": 0.0007},
            "routes": [
                {"weight": 0.5, "models": ["small", "large"], "thresholds": [0.5]},
                {"weight": 0.5, "models": ["large"], "thresholds": []},
            ],
            "expected": {"cost_usd": 0.0007, "quality": 0.75, "escalation_rate": 0.2},
        },
    },
    "envelope": [
        {"cost_usd": 0.00001, "quality": 0.5, "models": ["small"], "thresholds": [], "escalation_rate": 0},
        {
            "cost_usd": 0.0004,
            "quality": 0.7,
            "models": ["small", "large"],
            "thresholds": [0.5],
            "escalation_rate": 0.4,
        },
        {"cost_usd": 0.001, "quality": 0.8, "models": ["large"], "thresholds": [], "escalation_rate": 0},
    ],
    "on_missing_score": "escalate",
    "allow_degraded": True,
}


def model_configs(base_url: str) -> dict[str, Any]:
    """The test models: per-token price for small, per-query for medium and large."""
    return {
        "small": {
            "base_url": base_url,
            "model": "up-small",
            "timeout_s": 2,
            "max_retries": 2,
            "price": {"input_per_mtok": 0.1, "output_per_mtok": 0.2},
        },
        "medium": {
            "base_url": base_url,
            "model": "up-medium",
            "timeout_s": 2,
            "max_retries": 1,
            "price": {"per_query_usd": 0.0001},
        },
        "large": {
            "base_url": base_url,
            "model": "up-large",
            "timeout_s": 2,
            "max_retries": 1,
            "price": {"per_query_usd": 0.001},
        },
    }


@pytest.fixture(scope="session")
def scripted_upstream_server() -> Iterator[ScriptedUpstream]:
    """One scripted upstream for the whole session (use ``upstream`` in tests)."""
    server = ScriptedUpstream()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def upstream(scripted_upstream_server: ScriptedUpstream) -> ScriptedUpstream:
    """The scripted upstream, with scripts and records cleared."""
    scripted_upstream_server.reset()
    return scripted_upstream_server


@pytest.fixture
def write_policy(tmp_path: Path) -> Callable[..., Path]:
    """Write the test policy (with top-level ``changes``) to ``path`` (default tmp/policy.json)."""

    def write(path: Path | None = None, **changes: Any) -> Path:
        document = {**POLICY_DOCUMENT, **changes}
        document.pop("policy_id", None)
        target = path or tmp_path / "policy.json"
        save_policy(build_policy(document), target)
        return target

    return write


@pytest.fixture
def make_settings(
    upstream: ScriptedUpstream, write_policy: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Settings]:
    """Settings against the scripted upstream; an open gateway (no client keys) unless changed."""
    for name in ("CASCADE_API_KEYS", "CASCADE_ADMIN_KEY", "CASCADE_POLICY", "CASCADE_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)

    def make(policy: Path | str | None = None, **changes: Any) -> Settings:
        document: dict[str, Any] = {
            "models": model_configs(upstream.base_url),
            "policy": str(policy or write_policy()),
            "limits": {"max_body_bytes": 65536, "request_timeout_s": 10},
            "logging": {"level": "warning"},
        }
        document.update(changes)
        return Settings.from_mapping(document)

    return make


class RunningGateway:
    """The app served by uvicorn in a background thread."""

    def __init__(self, app: Any, server: uvicorn.Server, thread: threading.Thread, port: int):
        self.app = app
        self.server = server
        self.thread = thread
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    @property
    def gateway(self) -> Any:
        """The app's ``gateway.app.Gateway`` (metrics, pool, shared state)."""
        return self.app.state.gateway

    def client(self, api_key: str = "none", **kw: Any) -> OpenAI:
        """Official sync SDK client (no retries, short timeout)."""
        return OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, timeout=20, **kw)

    def async_client(self, api_key: str = "none", **kw: Any) -> AsyncOpenAI:
        """Official async SDK client (no retries, short timeout)."""
        return AsyncOpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, timeout=20, **kw)

    def metrics(self) -> dict[str, Any]:
        """``/metrics`` parsed with prometheus_client.parser: family name -> family."""
        text = httpx.get(self.url + "/metrics", timeout=5).text
        return {family.name: family for family in text_string_to_metric_families(text)}

    def sample(self, name: str, **labels: str) -> float:
        """Value of one sample (0.0 when absent); ``name`` is the full sample name."""
        for family in self.metrics().values():
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
        return 0.0


def serve(app: Any) -> RunningGateway:
    """Start uvicorn (uvloop, httptools, lifespan on) for ``app`` on a free loopback port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, loop="uvloop", http="httptools", lifespan="on", log_level="warning", access_log=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    end = time.monotonic() + 15
    while not server.started:
        if not thread.is_alive() or time.monotonic() > end:
            raise RuntimeError("the gateway did not start (see the log above)")
        time.sleep(0.01)
    return RunningGateway(app, server, thread, port)


def stop(running: RunningGateway) -> None:
    """Stop uvicorn and wait for its lifespan shutdown."""
    running.server.should_exit = True
    running.thread.join(15)


@pytest.fixture
def start_gateway(make_settings: Callable[..., Settings]) -> Iterator[Callable[..., RunningGateway]]:
    """Factory: ``start_gateway(settings=None, rng=None)`` -> RunningGateway (stopped after the test)."""
    running: list[RunningGateway] = []

    def start(settings: Settings | None = None, rng: random.Random | None = None) -> RunningGateway:
        app = create_app(settings or make_settings(), rng=rng)
        gateway = serve(app)
        running.append(gateway)
        return gateway

    yield start
    for gateway in running:
        stop(gateway)


@pytest.fixture
def gateway(start_gateway: Callable[..., RunningGateway]) -> RunningGateway:
    """The gateway with the default test settings and policy."""
    return start_gateway()


def run(coro: Any) -> Any:
    """Run a coroutine to completion from a sync test."""
    return asyncio.run(coro)
