"""Console test fixtures (the gateway fixtures of tests/gateway/conftest.py apply here too).

* ``console_settings(**changes)``: ``make_settings`` with the console enabled and the real Redis under
  the test's private prefix (``keys``); ``console={...}`` adds console options, other ``changes`` are
  top-level config fields (``redis_url=None``: the in-process ring).
* ``console_gateway``: the app in-process with those settings (``InProcessGateway``: ``http``, ``client()``).
* ``served_console`` (module): the app under uvicorn on loopback, console on, Redis, with seeded
  traffic sent through it (``ServedConsole``: ``url`` and the ids of one ``escalated``, one ``accepted``
  and one ``failed`` request, their records written).
* ``browser`` (session): the system Chromium under Playwright (tests/support/console_browser.py).
* ``console_page``: a new page of ``browser`` on ``served_console``, signed in through the login form;
  the test fails on any console error or page error of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
import redis
from playwright.sync_api import sync_playwright

from gateway.api.app import create_app
from gateway.config.settings import Settings
from gateway.redis.keys import RedisKeys
from tests.support.console_browser import ErrorWatch, launch_browser
from tests.support.gateway_testkit import ADMIN_KEY, RunningGateway, model_configs, serve, stop, until
from tests.support.in_process_gateway import InProcessGateway
from tests.support.policy_files import write_policy
from tests.support.scripted_upstream import ScriptedUpstream, error, ok
from tests.support.shared_redis import REDIS_URL, delete_prefix, fresh_keys


@pytest.fixture
def console_settings(make_settings: Callable[..., Settings], keys: Any) -> Callable[..., Settings]:
    """Settings with the console on and Redis (the test's prefix); see the module docstring."""

    def make(**changes: Any) -> Settings:
        console = {"enabled": True, **changes.pop("console", {})}
        changes.setdefault("redis_url", REDIS_URL)
        if changes["redis_url"] is None:
            del changes["redis_url"]
        return make_settings(console=console, **changes)

    return make


@pytest.fixture
def console_gateway(
    start_gateway: Callable[..., InProcessGateway], console_settings: Callable[..., Settings]
) -> InProcessGateway:
    """The gateway in-process with the console on and Redis."""
    return start_gateway(console_settings())


@dataclass(frozen=True)
class ServedConsole:
    """A served gateway with the console on, and the ids of the requests seeded through it."""

    running: RunningGateway
    escalated: str
    accepted: str
    failed: str

    @property
    def url(self) -> str:
        """The gateway's base URL (``http://127.0.0.1:<port>``)."""
        return self.running.url


@pytest.fixture(scope="module")
def served_console(
    scripted_upstream_server: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServedConsole]:
    """The gateway under uvicorn with the console on, Redis, and three requests sent through it."""
    keys = fresh_keys()
    upstream = scripted_upstream_server
    with pytest.MonkeyPatch.context() as env:
        for name in ("CASCADE_API_KEYS", "CASCADE_POLICY", "CASCADE_REDIS_URL"):
            env.delenv(name, raising=False)
        env.setenv("CASCADE_ADMIN_KEY", ADMIN_KEY)
        env.setenv("CASCADE_REDIS_PREFIX", keys.prefix)
        settings = Settings.from_mapping(
            {
                "models": model_configs(upstream.base_url),
                "policy": str(write_policy(tmp_path_factory.mktemp("console") / "policy.json")),
                "redis_url": REDIS_URL,
                "logging": {"level": "warning"},
                "auth": {"open": True},
                "console": {"enabled": True},
            }
        )
        running = serve(create_app(settings))
    try:
        yield _seed(running, upstream, keys)
    finally:
        stop(running)
        upstream.reset()
        delete_prefix(keys)


def _seed(running: RunningGateway, upstream: ScriptedUpstream, keys: RedisKeys) -> ServedConsole:
    """Send one escalated, one accepted and one failed request; wait until all three are recorded."""
    upstream.reset()
    client = running.client()
    question = [{"role": "user", "content": "What is the capital of France?"}]
    upstream.script("up-small", ok(confidence=0.3))
    escalated = client.chat.completions.with_raw_response.create(model="cascade", messages=question)
    upstream.script("up-small", ok(confidence=0.99))
    accepted = client.chat.completions.with_raw_response.create(model="cascade", messages=question)
    upstream.script("up-large", error(503), error(503))
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(
            model="cascade", messages=question, extra_headers={"x-cascade-tier": "direct"}
        )
    ids = [r.headers["x-request-id"] for r in (escalated, accepted, failed.value.response)]
    with redis.Redis.from_url(REDIS_URL, decode_responses=True) as client_of_redis:
        indexed = lambda: all(client_of_redis.zscore(keys.console_index, i) is not None for i in ids)  # noqa: E731
        assert until(indexed, 10), "the seeded requests' records were not written"
    return ServedConsole(running, *ids)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """The system Chromium under Playwright, for the whole session."""
    playwright = sync_playwright().start()
    try:
        chromium = launch_browser(playwright)
        yield chromium
        chromium.close()
    finally:
        playwright.stop()


@pytest.fixture
def console_page(browser: Any, served_console: ServedConsole) -> Iterator[Any]:
    """A page signed in to ``served_console``'s console; fails the test on any console or page error."""
    context = browser.new_context(base_url=served_console.url, viewport={"width": 1400, "height": 900})
    page = context.new_page()
    watch = ErrorWatch(page)
    page.goto("/console/login")
    page.get_by_label("Admin key").fill(ADMIN_KEY)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/console/requests")
    try:
        yield page
    finally:
        context.close()
    assert watch.errors == [], watch.errors
