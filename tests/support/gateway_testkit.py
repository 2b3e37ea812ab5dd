"""Shared helpers of the gateway tests (import them from here, not from conftest: every test
directory has a ``conftest`` module and ``from conftest import`` picks whichever loaded last).

* ``ADMIN_KEY``: the admin key of gateways built by the ``make_settings`` fixture.
* ``POLICY_DOCUMENT``: the test policy (tiers ``balanced``, ``chain``, ``direct``, ``mix``).
* ``model_configs(base_url)``: the test models ``small``/``medium``/``large`` -> ``up-small``/...
* ``until(predicate, timeout_s)``: poll a condition.
* ``post_and_leave(url, body, arrived)``: a client that leaves mid-request at a known point.
* ``serve(app)`` / ``stop(running)``: run an ASGI app under uvicorn in a thread (``RunningGateway``).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
import uvicorn
from openai import AsyncOpenAI, OpenAI
from prometheus_client.parser import text_string_to_metric_families

# The admin key of the gateways the ``make_settings`` fixture configures (CASCADE_ADMIN_KEY).
ADMIN_KEY = "sk-test-admin"

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
    """The test models: per-token price for small, per-query for medium and large; retries back off
    from 1 ms (the default 0.5 s base would only slow the tests that retry)."""
    return {
        "small": {
            "base_url": base_url,
            "model": "up-small",
            "timeout_s": 2,
            "max_retries": 2,
            "retry": {"base_s": 0.001},
            "price": {"input_per_mtok": 0.1, "output_per_mtok": 0.2},
        },
        "medium": {
            "base_url": base_url,
            "model": "up-medium",
            "timeout_s": 2,
            "max_retries": 1,
            "retry": {"base_s": 0.001},
            "price": {"per_query_usd": 0.0001},
        },
        "large": {
            "base_url": base_url,
            "model": "up-large",
            "timeout_s": 2,
            "max_retries": 1,
            "retry": {"base_s": 0.001},
            "price": {"per_query_usd": 0.001},
        },
    }


class MetricsView:
    """A gateway's ``/metrics``, read by ``metrics_text()``, parsed."""

    def metrics_text(self) -> str:
        """The ``/metrics`` page."""
        raise NotImplementedError

    def metrics(self) -> dict[str, Any]:
        """``/metrics`` parsed with prometheus_client.parser: family name -> family."""
        return {family.name: family for family in text_string_to_metric_families(self.metrics_text())}

    def sample(self, name: str, **labels: str) -> float:
        """Value of one sample (0.0 when absent); ``name`` is the full sample name."""
        for family in self.metrics().values():
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
        return 0.0


class RunningGateway(MetricsView):
    """The app served by uvicorn in a background thread."""

    def __init__(self, app: Any, server: uvicorn.Server, thread: threading.Thread, port: int):
        self.app = app
        self.server = server
        self.thread = thread
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    @property
    def gateway(self) -> Any:
        """The app's ``gateway.api.app.Gateway`` (metrics, pool, shared state)."""
        return self.app.state.gateway

    def client(self, api_key: str = "none", **kw: Any) -> OpenAI:
        """Official sync SDK client (no retries, short timeout)."""
        return OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, timeout=20, **kw)

    def async_client(self, api_key: str = "none", **kw: Any) -> AsyncOpenAI:
        """Official async SDK client (no retries, short timeout)."""
        return AsyncOpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, timeout=20, **kw)

    def readiness(self, admin_key: str = ADMIN_KEY) -> httpx.Response:
        """``GET /readyz`` with the admin key: the detailed view (policy, Redis, upstreams)."""
        return httpx.get(self.url + "/readyz", headers={"authorization": f"Bearer {admin_key}"}, timeout=5)

    def metrics_text(self) -> str:
        return httpx.get(self.url + "/metrics", timeout=5).text


def until(predicate: Any, timeout_s: float = 5.0) -> bool:
    """Poll ``predicate()`` every 50 ms until it holds or ``timeout_s`` passed; its last value."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def post_and_leave(
    url: str, body: dict[str, Any], arrived: Callable[[], bool], timeout_s: float = 10.0
) -> None:
    """POST ``body`` to ``url`` (``http://host:port/path``) on a socket of its own, wait until
    ``arrived()`` (the upstream holds the call, say), then close the connection unread: a client
    that leaves once its request is under way, not after a timer the gateway may not have met."""
    address, _, path = url.removeprefix("http://").partition("/")
    host, _, port = address.partition(":")
    payload = orjson.dumps(body)
    head = f"POST /{path} HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n"
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(f"{head}content-length: {len(payload)}\r\n\r\n".encode() + payload)
        assert until(arrived, timeout_s), "the request did not arrive where the client waited for it"


def serve(app: Any, http: Any = "httptools") -> RunningGateway:
    """Start uvicorn (uvloop, httptools, lifespan on) for ``app`` on a free loopback port.

    ``http``: uvicorn's protocol; ``gateway.api.serving.gateway_http_protocol(limits)`` for the one
    ``cascade serve`` runs (its request cycle and disconnect hook)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        loop="uvloop",
        http=http,
        lifespan="on",
        log_level="warning",
        access_log=False,
        proxy_headers=False,  # as `cascade serve`: the gateway alone reads forwarded addresses
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


@contextmanager
def serving(http: Any = "httptools") -> Iterator[Callable[[Any], RunningGateway]]:
    """``start(app)`` -> the app served (``serve``, with protocol ``http``); every app it started
    is stopped on exit."""
    running: list[RunningGateway] = []

    def start(app: Any) -> RunningGateway:
        gateway = serve(app, http)
        running.append(gateway)
        return gateway

    try:
        yield start
    finally:
        for gateway in running:
            stop(gateway)
