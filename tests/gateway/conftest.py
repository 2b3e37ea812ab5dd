"""Gateway test fixtures: a scripted upstream and the real app, in-process or under uvicorn on loopback.

Helpers to import (policy document, model configs, ``serve``/``RunningGateway``, the scripted
upstream) live in tests/support/ (``tests.support.gateway_testkit``, ``tests.support.scripted_upstream``);
import them from there, never ``from conftest`` (ambiguous across test dirs).

Reusable pieces (import-free: they are fixtures):

* ``upstream``: the session's ``ScriptedUpstream`` reset for each test (tests/support/fixtures.py).
  ``upstream.script("up-small", ok(confidence=0.2), error(503))`` queues replies per upstream model id.
* ``write_policy(path=None, **changes)``: writes a valid policy (tiers below) and returns its path;
  ``changes`` replace top-level policy fields (e.g. ``allow_degraded=False``, ``tiers={...}``).
* ``make_settings(policy=..., **changes)``: a ``Settings`` whose models point at the upstream
  (``auth.open: true``: with no client key configured every request is served; the admin key is
  ``tests.support.gateway_testkit.ADMIN_KEY``):
  ``small`` -> ``up-small``, ``medium`` -> ``up-medium``, ``large`` -> ``up-large``
  (``changes`` replace top-level config fields, e.g. ``redis_url=...`` or ``models=...``).
* ``start_gateway(settings=None, rng=None)``: runs ``create_app(settings)`` in-process (its lifespan on
  a uvloop in a background thread, no socket; tests/support/in_process_gateway.py), its upstream
  sessions reaching the scripted upstream in memory (the transport seam, gateway.upstream.transport);
  returns an ``InProcessGateway`` with ``app``, ``gateway`` (the app's Gateway), ``http`` (an httpx
  client of the app), ``client()``/``async_client()`` (official OpenAI SDK over the in-process
  transport, no retries) and ``metrics()`` (parsed with prometheus_client.parser). Stopped after the test.
* ``gateway``: ``start_gateway()`` with the default settings and policy.
* ``start_served_gateway`` / ``served_gateway``: the same under uvicorn (uvloop, httptools) on a free
  loopback port, reaching the upstream over loopback too (a ``RunningGateway`` with ``url``): for the
  tests where the socket is the point (HTTP limits, uvicorn's own behaviour, cut bodies relayed to a
  client, back-pressure, client disconnects).

Default policy tiers (threshold 0.5 on mean token negentropy, top_k 5): ``balanced`` (default):
small -> large; ``chain``: small -> medium -> large; ``direct``: large only; ``mix``: 50/50 of
small -> large and large. Scripted ``ok(confidence=0.99)`` scores ~0.96 (accepted), ``ok(confidence=0.3)``
scores ~0.1 (escalated).
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from gateway.api.app import create_app
from gateway.config.settings import Settings
from tests.support.gateway_testkit import ADMIN_KEY, RunningGateway, model_configs, serving
from tests.support.in_process_gateway import InProcessGateway, scripted_transport, serve_in_process
from tests.support.policy_files import write_policy as write_policy_file
from tests.support.scripted_upstream import ScriptedUpstream
from tests.support.shared_redis import REDIS_URL, delete_prefix, fresh_keys


@pytest.fixture
def write_policy(tmp_path: Path) -> Callable[..., Path]:
    """Write the test policy (with top-level ``changes``) to ``path`` (default tmp/policy.json)."""

    def write(path: Path | None = None, **changes: Any) -> Path:
        return write_policy_file(path or tmp_path / "policy.json", **changes)

    return write


@pytest.fixture
def make_settings(
    upstream: ScriptedUpstream, write_policy: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Settings]:
    """Settings against the scripted upstream; an open gateway (no client keys) unless changed."""
    for name in ("CASCADE_API_KEYS", "CASCADE_POLICY", "CASCADE_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CASCADE_ADMIN_KEY", ADMIN_KEY)

    def make(policy: Path | str | None = None, **changes: Any) -> Settings:
        document: dict[str, Any] = {
            "models": model_configs(upstream.base_url),
            "policy": str(policy or write_policy()),
            "limits": {"max_body_bytes": 65536, "request_timeout_s": 10},
            "logging": {"level": "warning"},
            "auth": {"open": True},
        }
        document.update(changes)
        return Settings.from_mapping(document)

    return make


@pytest.fixture
def start_gateway(
    make_settings: Callable[..., Settings], upstream: ScriptedUpstream
) -> Iterator[Callable[..., InProcessGateway]]:
    """Factory: ``start_gateway(settings=None, rng=None)`` -> InProcessGateway (stopped after the test)."""
    running: list[InProcessGateway] = []

    def start(settings: Settings | None = None, rng: random.Random | None = None) -> InProcessGateway:
        app = create_app(settings or make_settings(), rng=rng, transport=scripted_transport(upstream))
        gateway = serve_in_process(app)
        running.append(gateway)
        return gateway

    yield start
    for gateway in running:
        gateway.stop()


@pytest.fixture
def gateway(start_gateway: Callable[..., InProcessGateway]) -> InProcessGateway:
    """The gateway with the default test settings and policy, in-process."""
    return start_gateway()


@pytest.fixture
def start_served_gateway(make_settings: Callable[..., Settings]) -> Iterator[Callable[..., RunningGateway]]:
    """Factory: ``start_served_gateway(settings=None, rng=None)`` -> RunningGateway under uvicorn on
    loopback (stopped after the test)."""
    with serving() as serve_app:

        def start(settings: Settings | None = None, rng: random.Random | None = None) -> RunningGateway:
            return serve_app(create_app(settings or make_settings(), rng=rng))

        yield start


@pytest.fixture
def served_gateway(start_served_gateway: Callable[..., RunningGateway]) -> RunningGateway:
    """The gateway with the default test settings and policy, under uvicorn on loopback."""
    return start_served_gateway()


def run(coro: Any) -> Any:
    """Run a coroutine to completion from a sync test."""
    return asyncio.run(coro)


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A private Redis key prefix for one test (also for apps it starts), deleted afterwards."""
    keys = fresh_keys()
    monkeypatch.setenv("CASCADE_REDIS_PREFIX", keys.prefix)
    yield keys
    delete_prefix(keys)


@pytest.fixture
def sync_redis() -> Any:
    """A synchronous client of the real Redis the tests use."""
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
async def async_redis() -> Any:
    """An asyncio client of the real Redis the tests use."""
    client = aioredis.from_url(REDIS_URL, decode_responses=True)
    yield client
    await client.aclose()


@pytest.fixture
def released() -> Iterator[threading.Event]:
    """The event a held reply (``Reply.hold_first``) waits for, set when the test ends (the
    upstream's handler then ends)."""
    event = threading.Event()
    yield event
    event.set()
