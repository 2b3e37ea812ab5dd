"""Fixtures shared by every test package (a pytest plugin registered in tests/conftest.py).

* ``scripted_upstream_server``: one ``ScriptedUpstream`` for the whole session.
* ``upstream``: that server with scripts, defaults and records cleared, for one test:
  ``upstream.script("up-small", ok(confidence=0.2), error(503))`` queues replies per upstream model id.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.scripted_upstream import ScriptedUpstream, running_upstream


@pytest.fixture(scope="session")
def scripted_upstream_server() -> Iterator[ScriptedUpstream]:
    """One scripted upstream for the session (use ``upstream`` in tests)."""
    with running_upstream() as server:
        yield server


@pytest.fixture
def upstream(scripted_upstream_server: ScriptedUpstream) -> ScriptedUpstream:
    """The scripted upstream, with scripts, defaults and records cleared."""
    scripted_upstream_server.reset()
    return scripted_upstream_server
