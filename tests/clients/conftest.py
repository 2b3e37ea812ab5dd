"""Real-client fixtures: the gateway app against the scripted upstream, as tests/gateway builds it,
and the demo on the real local models.

The helpers come from tests/support (``gateway_testkit``, ``scripted_upstream``, ``policy_files``);
the client-side pieces (installed CLIs, environments, scripted tool calls) live in ``client_support``.

* ``upstream`` (tests/support/fixtures.py): the session's ``ScriptedUpstream``, reset for each test.
* ``start_gateway(tier_headers=False, **changes)``: the real app under uvicorn in a thread (open
  auth, the test policy of gateway_testkit: tiers ``balanced`` small -> large, ``direct`` large
  only, ...), with the configured default body limit (1 MiB: agent CLIs send 40-60 KB bodies).
* ``gateway``: ``start_gateway()``.
* ``keyed_gateway``: a gateway that serves only ``client_support.CLIENT_KEY`` (how the agent CLIs
  authenticate is part of what their tests prove).
* ``local_demo`` (session): the demo on the session's real local pool (``tests.support.local_demo``),
  for the ``e2e`` tests of the agent CLIs (``local_agents``: tasks, time budget, client settings).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from client_support import CLIENT_KEY

from gateway.api.app import create_app
from gateway.config.settings import Settings
from tests.support.gateway_testkit import ADMIN_KEY, RunningGateway, model_configs, serving
from tests.support.local_demo import LocalDemo, running_demo
from tests.support.local_pool import LocalPool
from tests.support.policy_files import write_policy
from tests.support.scripted_upstream import ScriptedUpstream


@pytest.fixture
def start_gateway(
    upstream: ScriptedUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., RunningGateway]]:
    """Factory: ``start_gateway(**changes)`` -> RunningGateway (stopped after the test)."""
    for name in ("CASCADE_API_KEYS", "CASCADE_POLICY", "CASCADE_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CASCADE_ADMIN_KEY", ADMIN_KEY)
    policy = write_policy(tmp_path / "policy.json")
    with serving() as serve_app:

        def start(**changes: Any) -> RunningGateway:
            document: dict[str, Any] = {
                "models": model_configs(upstream.base_url),
                "policy": str(policy),
                "limits": {"request_timeout_s": 20},
                "logging": {"level": "warning"},
                "auth": {"open": True},
                **changes,
            }
            return serve_app(create_app(Settings.from_mapping(document)))

        yield start


@pytest.fixture
def gateway(start_gateway: Callable[..., RunningGateway]) -> RunningGateway:
    """The gateway with the test policy against the scripted upstream."""
    return start_gateway()


@pytest.fixture
def keyed_gateway(
    start_gateway: Callable[..., RunningGateway], monkeypatch: pytest.MonkeyPatch
) -> RunningGateway:
    """A gateway whose only client key is ``CLIENT_KEY``."""
    monkeypatch.setenv("TEST_CLIENT_KEYS", CLIENT_KEY)
    return start_gateway(auth={"api_keys_env": "TEST_CLIENT_KEYS", "admin_key_env": None})


@pytest.fixture(scope="session")
def local_demo(
    local_pool: LocalPool, repo_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalDemo]:
    """The demo on the session's real local pool (tests/support/local_demo.py), for the session:
    the agent CLIs' e2e tests share its gateway, and with the pool llama-server's prompt cache."""
    # The arithmetic policy the agent CLIs were measured on (docs/local-models.md): their requests
    # carry tools, served by its balanced tier (the default demo policy sends them to its tool-call
    # members, which were chosen for single function calls, not for an agent's shell).
    text_policy = repo_root / "policies" / "local-demo.json"
    with running_demo(local_pool, repo_root, tmp_path_factory.mktemp("local-demo"), text_policy) as demo:
        yield demo
