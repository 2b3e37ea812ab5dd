"""Fixtures of the replay tests: a real gateway in front of the scripted upstream, for replay.

``cascade replay`` is tested against the real app (``gateway.app.create_app`` under uvicorn) and a
real policy file; only the upstream models are the scripted seam double of the gateway tests
(tests/gateway/scripted_upstream.py, shared through tests/gateway/gateway_testkit.py).

* ``scripted``: the session's ``ScriptedUpstream``, reset for each test (models ``up-small``,
  ``up-medium``, ``up-large``).
* ``policy_file(**tier_changes)``: the gateway tests' policy with some tiers' fields replaced,
  written to tmp and returned as a path.
* ``start_replay_gateway(policy_path, api_keys=None)``: the gateway serving that policy in front of
  ``scripted`` (``small``/``medium``/``large`` priced as in gateway_testkit); stopped after the test.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gateway"))  # the gateway test kit

from gateway_testkit import POLICY_DOCUMENT, RunningGateway, model_configs, serve, stop
from scripted_upstream import ScriptedUpstream

from gateway.app import create_app
from gateway.config import Settings
from policies import build_policy, save_policy


@pytest.fixture(scope="session")
def scripted_server() -> Iterator[ScriptedUpstream]:
    """One scripted upstream for the session (use ``scripted``)."""
    server = ScriptedUpstream()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def scripted(scripted_server: ScriptedUpstream) -> ScriptedUpstream:
    """The scripted upstream with scripts, defaults and records cleared."""
    scripted_server.reset()
    return scripted_server


@pytest.fixture
def policy_file(tmp_path: Path) -> Callable[..., Path]:
    """Write the test policy with ``tier=dict(field=value)`` replacements; returns its path."""
    counter = iter(range(1000))

    def write(**tier_changes: dict[str, Any]) -> Path:
        document = copy.deepcopy(POLICY_DOCUMENT)
        for tier, changes in tier_changes.items():
            document["tiers"][tier].update(changes)
        path = tmp_path / f"policy-{next(counter)}.json"
        save_policy(build_policy(document), path)
        return path

    return write


@pytest.fixture
def start_replay_gateway(
    scripted: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., RunningGateway]]:
    """Factory: the real gateway serving ``policy_path`` in front of ``scripted``."""
    for name in ("CASCADE_API_KEYS", "CASCADE_ADMIN_KEY", "CASCADE_POLICY", "CASCADE_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    running: list[RunningGateway] = []

    def start(policy_path: Path, api_keys: str | None = None) -> RunningGateway:
        if api_keys is not None:
            monkeypatch.setenv("CASCADE_API_KEYS", api_keys)
        settings = Settings.from_mapping(
            {
                "models": model_configs(scripted.base_url),
                "policy": str(policy_path),
                "limits": {"max_body_bytes": 65536, "request_timeout_s": 10},
                "logging": {"level": "warning"},
                "auth": {"open": True},  # no client key configured: every caller is served
            }
        )
        gateway = serve(create_app(settings))
        running.append(gateway)
        return gateway

    yield start
    for gateway in running:
        stop(gateway)
