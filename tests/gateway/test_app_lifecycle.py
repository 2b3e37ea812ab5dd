"""Policy hot reload as the app sees it, Redis-backed state, non-streaming upstreams, unexpected errors."""

from __future__ import annotations

import time

import openai
import pytest

from policies import build_policy
from tests.support.gateway_testkit import POLICY_DOCUMENT
from tests.support.scripted_upstream import ok
from tests.support.shared_redis import REDIS_URL, delete_prefix, fresh_keys

MESSAGES = [{"role": "user", "content": "hi"}]


def _until(predicate, timeout_s: float = 5.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_policy_file_change_is_served_and_published_in_metrics(gateway, write_policy, upstream) -> None:
    old_id = gateway.gateway.policy.policy_id
    tiers = {**POLICY_DOCUMENT["tiers"], "fast": POLICY_DOCUMENT["tiers"]["direct"]}
    new_id = build_policy({**POLICY_DOCUMENT, "tiers": tiers}).policy_id
    write_policy(tiers=tiers)
    assert _until(lambda: "cascade/fast" in [m.id for m in gateway.client().models.list()])
    raw = gateway.client().chat.completions.with_raw_response.create(model="cascade/fast", messages=MESSAGES)
    assert raw.headers["x-cascade-policy"] == new_id
    families = gateway.metrics()
    info = {s.labels["policy_id"]: s.value for s in families["cascade_policy_info"].samples}
    assert info == {new_id: 1.0} and old_id not in info
    assert gateway.sample("cascade_expected_escalation_rate", tier="fast") == 0.0


def test_corrupt_policy_file_keeps_last_good_policy_and_counts(gateway, tmp_path, upstream) -> None:
    good_id = gateway.gateway.policy.policy_id
    (tmp_path / "policy.json").write_text('{"schema_version": 1, "oops"')
    assert _until(lambda: gateway.sample("cascade_policy_reload_failures_total") >= 1)
    raw = gateway.client().chat.completions.with_raw_response.create(model="cascade", messages=MESSAGES)
    assert raw.headers["x-cascade-policy"] == good_id


def test_redis_backed_gateway_reports_redis_up(start_gateway, make_settings, monkeypatch, upstream) -> None:
    keys = fresh_keys()
    monkeypatch.setenv("CASCADE_REDIS_PREFIX", keys.prefix)
    try:
        gateway = start_gateway(make_settings(redis_url=REDIS_URL))
        gateway.client().chat.completions.create(model="cascade", messages=MESSAGES)
        assert gateway.sample("cascade_redis_up") == 1
        assert gateway.readiness().json()["redis"] is True
    finally:
        delete_prefix(keys)


def test_upstream_ignoring_stream_is_replayed(gateway, upstream) -> None:
    upstream.script("up-small", ok(confidence=0.3))
    upstream.script("up-large", ok("whole answer", ignore_stream=True))
    chunks = list(gateway.client().chat.completions.create(model="cascade", messages=MESSAGES, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "whole answer"
    assert chunks[-1].model_extra["cascade"]["models_called"] == ["small", "large"]


def test_unexpected_exception_is_a_500_openai_error_without_traceback(gateway, upstream, monkeypatch) -> None:
    async def explode(*args, **kwargs):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(gateway.gateway.engine, "run", explode)
    with pytest.raises(openai.InternalServerError) as info:
        gateway.client().chat.completions.create(model="cascade", messages=MESSAGES)
    body = info.value.body
    assert info.value.status_code == 500
    assert body["code"] == "internal_error" and "secret internals" not in body["message"]
    assert "Traceback" not in str(body)
