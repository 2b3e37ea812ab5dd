"""Reliability fixtures: real processes, a private Redis, the fault-injecting scripted upstream.

The pieces live in ``processes.py`` (import them from there, never from conftest); these fixtures
start and always stop them:

* ``upstream`` (tests/support/fixtures.py): the session's ``ScriptedUpstream`` on a free loopback
  port, scripts and records cleared for each test. ``upstream.produced`` is what it sent
  in full (price it with ``processes.true_cost_usd``).
* ``redis_server``: a private ``redis-server`` on its own free port (no persistence), started for
  the test and stopped after it; ``kill()``, ``restart()`` (empty), ``freeze()``/``thaw()``.
* ``policy_path``: the test policy written to the test's tmp directory.
* ``upstream_url`` (module): the deployment tests' upstream (tests/support/deploy_upstream.py);
  ``keys``: a private prefix of the shared Redis, deleted after the test (Redis lost this
  deployment's data); ``client``: a sync client of the shared Redis (str replies).
* ``start_replicas(n=2, *, redis=..., env=..., **config_changes)``: writes one config (against
  ``upstream``, the policy file and ``redis.url`` when given; ``config_changes`` replace top-level
  config sections, e.g. ``budgets={...}``), starts ``n`` ``cascade serve`` processes with ``env``
  (e.g. ``{"CASCADE_API_KEYS": "sk-a"}``) and waits until all answer /healthz. Returns the list of
  ``GatewayProcess``; every replica is stopped (SIGTERM, then SIGKILL) after the test and its log
  is printed if the test failed.

Example::

    def test_something(start_replicas, redis_server, upstream):
        a, b = start_replicas(2, redis=redis_server, env={"CASCADE_API_KEYS": "sk-a"})
        a.client("sk-a").chat.completions.create(model="cascade", messages=[...])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from processes import RedisServer, write_gateway_config

from gateway.redis.keys import RedisKeys
from tests.support.deploy_upstream import running_deploy_upstream
from tests.support.gateway_process import GatewayProcess
from tests.support.policy_files import write_policy
from tests.support.scripted_upstream import ScriptedUpstream
from tests.support.shared_redis import REDIS_URL, delete_prefix, fresh_keys


@pytest.fixture(scope="module")
def upstream_url() -> Iterator[str]:
    with running_deploy_upstream() as url:
        yield url


@pytest.fixture
def keys() -> Iterator[RedisKeys]:
    keys = fresh_keys()
    yield keys
    delete_prefix(keys)  # Redis lost this deployment's data


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A private, empty redis-server for this test (stopped afterwards, even if frozen)."""
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def policy_path(tmp_path: Path) -> Path:
    """The test policy as a file."""
    return write_policy(tmp_path / "policy.json")


@pytest.fixture
def start_replicas(
    request: pytest.FixtureRequest, tmp_path: Path, upstream: ScriptedUpstream, policy_path: Path
) -> Iterator[Callable[..., list[GatewayProcess]]]:
    """Factory of running ``cascade serve`` replicas; see the module docstring."""
    started: list[GatewayProcess] = []

    def start(
        n: int = 2,
        *,
        redis: RedisServer | None = None,
        env: dict[str, str] | None = None,
        **config_changes: Any,
    ) -> list[GatewayProcess]:
        config = write_gateway_config(
            tmp_path,
            upstream_base_url=upstream.base_url,
            policy=policy_path,
            redis_url=redis.url if redis is not None else None,
            name=f"gateway-{len(started)}.yaml",
            **config_changes,
        )
        replicas = [GatewayProcess(config, env=env).start() for _ in range(n)]
        started.extend(replicas)
        for replica in replicas:
            replica.wait_ready()
        return replicas

    yield start
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for replica in started:
        replica.stop()
        if failed:
            print(f"--- log of replica {replica.url} ---\n{replica.log_text()[-6000:]}")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each phase's report on the item, so teardown knows whether the test failed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
