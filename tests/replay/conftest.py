"""Fixtures of the replay tests: a real gateway in front of the scripted upstream, for replay.

``cascade replay`` is tested against the real app (``gateway.api.app.create_app`` under uvicorn) and a
real policy file; only the upstream models are the scripted seam double (tests/support/).

* ``upstream`` (tests/support/fixtures.py): the session's ``ScriptedUpstream``, reset for each test
  (models ``up-small``, ``up-medium``, ``up-large``).
* ``policy_file(**tier_changes)``: the test policy with some tiers' fields replaced, written to tmp
  and returned as a path.
* ``start_replay_gateway(policy_path, api_keys=None, limits=None)``: the gateway serving that policy
  in front of ``upstream`` (``small``/``medium``/``large`` priced as in gateway_testkit), with
  ``limits`` added to its own; stopped after the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.api.app import create_app
from gateway.config.settings import Settings
from tests.support.gateway_testkit import RunningGateway, model_configs, serving
from tests.support.policy_files import write_policy
from tests.support.scripted_upstream import ScriptedUpstream


@pytest.fixture
def policy_file(tmp_path: Path) -> Callable[..., Path]:
    """Write the test policy with ``tier=dict(field=value)`` replacements; returns its path."""
    counter = iter(range(1000))

    def write(**tier_changes: dict[str, Any]) -> Path:
        return write_policy(tmp_path / f"policy-{next(counter)}.json", tier_changes)

    return write


@pytest.fixture
def start_replay_gateway(
    upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., RunningGateway]]:
    """Factory: the real gateway serving ``policy_path`` in front of ``upstream``."""
    for name in ("CASCADE_API_KEYS", "CASCADE_ADMIN_KEY", "CASCADE_POLICY", "CASCADE_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    with serving() as serve_app:

        def start(
            policy_path: Path, api_keys: str | None = None, limits: dict[str, Any] | None = None
        ) -> RunningGateway:
            if api_keys is not None:
                monkeypatch.setenv("CASCADE_API_KEYS", api_keys)
            settings = Settings.from_mapping(
                {
                    "models": model_configs(upstream.base_url),
                    "policy": str(policy_path),
                    "limits": {"max_body_bytes": 65536, "request_timeout_s": 10, **(limits or {})},
                    "logging": {"level": "warning"},
                    "auth": {"open": True},  # no client key configured: every caller is served
                }
            )
            return serve_app(create_app(settings))

        yield start
