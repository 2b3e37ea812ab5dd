"""The aggregate pages (Tiers, Keys, Policy and learning, Upstreams) in the system Chromium, over a
gateway served on loopback with the console on, Redis, two client keys and traffic sent through it
(the scripted upstream): what each page shows, by role and name, and no console error.

``served_console`` is this module's own (the ``console_page`` fixture of tests/gateway/console/conftest.py
signs in to it): keys, a calibrated policy with held-out expectations and score bins, a recalibration
report.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
import redis

from calibration.recalibration.redis_io import keep_report
from gateway.api.app import create_app
from gateway.commands.keys import add_key
from gateway.config.settings import Settings
from gateway.redis.keys import RedisKeys
from tests.support.console_browser import screenshot
from tests.support.gateway_testkit import ADMIN_KEY, RunningGateway, model_configs, serve, stop
from tests.support.policy_files import bounds_expectation, heldout_expectation, write_policy
from tests.support.scripted_upstream import ScriptedUpstream, error, ok
from tests.support.shared_redis import REDIS_URL, delete_prefix, fresh_keys

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
SCORE_BINS = {
    "calibration_rows": 100,
    "models": {"small": {"edges": [0.2, 0.4, 0.6, 0.8], "proportions": [0.2] * 5}},
    "tiers": {"balanced": {"small": [0.2] * 5}},
}


@dataclass(frozen=True)
class ServedAggregates:
    """The served gateway, its keys' secrets and ids, and the served policy's id."""

    running: RunningGateway
    secret: str
    key_id: str
    policy_id: str

    @property
    def url(self) -> str:
        """The gateway's base URL."""
        return self.running.url


@pytest.fixture(scope="module")
def served_console(
    scripted_upstream_server: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServedAggregates]:
    """The gateway under uvicorn (console on, Redis, two keys) with traffic of both keys sent through it."""
    keys = fresh_keys()
    upstream = scripted_upstream_server
    folder = tmp_path_factory.mktemp("aggregates")
    heldout = heldout_expectation((0.0004, 0.0003, 0.0005), (0.7, 0.66, 0.74), (0.4, 0.35, 0.45))
    bounds = bounds_expectation(0.64, 0.00052, (0.3, 0.5), confidence=0.9)
    expected = {"cost_usd": 0.0004, "quality": 0.7, "escalation_rate": 0.4}
    expected |= {"heldout": heldout, "bounds": bounds}
    policy = write_policy(
        folder / "policy.json",
        {"balanced": {"expected": expected}},
        score_distribution=SCORE_BINS,
    )
    store = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    secret, key_id = add_key(store, "team-a", 5.0, keys, rate_limits=[{"window_s": 60, "requests": 100}])
    other, _ = add_key(store, "team-b", 1.0, keys)
    with pytest.MonkeyPatch.context() as env:
        for name in ("CASCADE_API_KEYS", "CASCADE_POLICY", "CASCADE_REDIS_URL"):
            env.delenv(name, raising=False)
        env.setenv("CASCADE_ADMIN_KEY", ADMIN_KEY)
        env.setenv("CASCADE_REDIS_PREFIX", keys.prefix)
        settings = Settings.from_mapping(
            {
                "models": model_configs(upstream.base_url),
                "policy": str(policy),
                "redis_url": REDIS_URL,
                "logging": {"level": "warning"},
                "console": {"enabled": True},
            }
        )
        running = serve(create_app(settings))
    try:
        policy_id = running.gateway.policy.policy_id
        _send(running, upstream, secret, other)
        _report(store, keys, policy_id)
        yield ServedAggregates(running, secret, key_id, policy_id)
    finally:
        stop(running)
        upstream.reset()
        delete_prefix(keys)
        store.close()


def _send(running: RunningGateway, upstream: ScriptedUpstream, secret: str, other: str) -> None:
    """Balanced: two accepted, two escalated, one whose cheap stage fails (5xx, escalated), one
    streamed and accepted; one direct request of the other key."""
    upstream.reset()
    upstream.set_default("up-large", ok("Paris is the capital of France.", confidence=0.9))
    scores = [ok(confidence=0.9), ok(confidence=0.9), ok(confidence=0.1), ok(confidence=0.3)]
    upstream.script("up-small", *scores, error(500), error(500), error(500))
    client = running.client(api_key=secret)
    for _ in range(5):
        client.chat.completions.create(model="cascade", messages=QUESTION)
    upstream.script("up-small", ok(confidence=0.9))
    with client.chat.completions.create(model="cascade", messages=QUESTION, stream=True) as stream:
        assert [chunk for chunk in stream]
    running.client(api_key=other).chat.completions.create(
        model="cascade", messages=QUESTION, extra_headers={"x-cascade-tier": "direct"}
    )
    with pytest.raises(openai.AuthenticationError):
        running.client(api_key="sk-not-a-key").chat.completions.create(model="cascade", messages=QUESTION)


def _report(store: Any, keys: RedisKeys, policy_id: str) -> None:
    """A recalibration that compared the served policy with a new one and pushed it."""
    measures = {"quality": {"mean": 0.69}, "cost_usd": {"mean": 0.00041}, "escalation_rate": {"mean": 0.42}}
    keep_report(
        store,
        {
            "created_at": "2026-12-06T05:30:00+00:00",
            "current_policy": {"policy_id": policy_id, "source": "redis"},
            "new_policy": {"policy_id": "sha256:5e1f"},
            "tiers": {"balanced": {"current": measures, "new": measures, "ok": True}},
            "decision": {"accepted": True, "reason": None, "pushed": True, "version": 7},
        },
        keys,
    )


def _row(page: Any, table: str, name: str) -> Any:
    return page.get_by_role("table", name=table).get_by_role("row").filter(has_text=name)


def test_the_tiers_page_compares_promised_with_live_and_draws_envelope_and_scores(console_page: Any) -> None:
    console_page.get_by_role("link", name="Tiers").click()
    console_page.wait_for_url("**/console/tiers")
    balanced = _row(console_page, "Promised and live per tier", "balanced")
    cells = balanced.get_by_role("cell")
    assert cells.nth(0).inner_text() == "cascade"
    assert "small -> large @ 0.5" in cells.nth(1).inner_text()
    assert cells.nth(2).inner_text() == "6"
    assert cells.nth(5).inner_text() == "40.0%" and cells.nth(6).inner_text() == "50.0%"  # 3 of 6 escalated
    assert cells.nth(8).inner_text().startswith("0.690")  # labelled by the recalibration
    assert "no labels" in _row(console_page, "Promised and live per tier", "chain").inner_text()
    for figure in ("Envelope: cost per request against quality", "Scores of small in balanced"):
        assert console_page.get_by_role("figure", name=figure).locator("canvas").count() >= 1
    bounds = _row(console_page, "Bounds per tier", "balanced").get_by_role("cell")
    shown = [bounds.nth(i).inner_text() for i in (0, 1, 2, 4)]
    assert shown == ["90%", "≥ 0.640", "≤ $0.00052", "in [30.0%, 50.0%]"]
    assert bounds.nth(5).inner_text() == "50.0% (not enough requests)"  # 6 served: under 30
    chain = _row(console_page, "Bounds per tier", "chain").inner_text()
    assert "no bounds (policy calibrated without them)" in chain
    drift = _row(console_page, "Drift of tier balanced", "small")
    assert "too few scores" in drift.inner_text()
    screenshot(console_page, "console-tiers")


def test_the_keys_page_lists_spend_limits_and_windows_never_a_secret(
    console_page: Any, served_console: ServedAggregates
) -> None:
    console_page.goto("/console/keys")
    row = _row(console_page, "Client keys", "team-a")
    text = row.inner_text()
    assert served_console.key_id in text and "$5" in text and "/100 requests" in text
    assert "no limit" not in text
    assert served_console.secret not in console_page.content()
    chart = console_page.get_by_role("figure", name="Spend over time of the keys that spent most")
    assert chart.locator("canvas").count() >= 1
    screenshot(console_page, "console-keys")


def test_the_policy_page_shows_the_served_policy_and_the_last_recalibration(
    console_page: Any, served_console: ServedAggregates
) -> None:
    console_page.goto("/console/policy")
    assert served_console.policy_id in console_page.get_by_role("main").inner_text()
    assert "cascade" in _row(console_page, "Tiers of the served policy", "balanced").inner_text()
    assert "ok" in _row(console_page, "Held-out comparison", "balanced").inner_text()
    assert console_page.get_by_text("yes, version 7").is_visible()
    assert console_page.get_by_text("No replica samples traffic").is_visible()
    screenshot(console_page, "console-policy")


def test_the_upstreams_page_counts_failures_by_kind_and_shows_breakers(console_page: Any) -> None:
    console_page.goto("/console/upstreams")
    small = _row(console_page, "Upstream models", "small").get_by_role("cell")
    assert "5xx: 3" in small.nth(2).inner_text()  # one request's three attempts (two retries)
    assert small.nth(6).inner_text() == "closed"
    large = _row(console_page, "Upstream models", "large").get_by_role("cell")
    assert large.nth(0).inner_text() == "4" and "none" in large.nth(2).inner_text()
    streamed = _row(console_page, "Time to first token per tier", "balanced").get_by_role("cell")
    assert streamed.nth(0).inner_text() == "1" and streamed.nth(1).inner_text().endswith("ms")
    screenshot(console_page, "console-upstreams")
