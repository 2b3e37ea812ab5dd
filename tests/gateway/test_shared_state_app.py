"""Shared state through the running app: Redis hot reload across replicas, keys, budgets, admin, outages.

Every test uses a private Redis key prefix (``CASCADE_REDIS_PREFIX``), so the contract keys under
``cascade:`` are never touched and tests never see each other.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.commands.keys import add_key
from policies import build_policy, load_policy, save_policy
from publishing import push_policy
from tests.support.gateway_testkit import POLICY_DOCUMENT, until
from tests.support.scripted_upstream import ok
from tests.support.shared_redis import REDIS_URL, ThreadedRedisLink

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def policy_file(tmp_path: Path, threshold: float, name: str = "policy.json") -> tuple[Path, str]:
    """The test policy with the balanced tier's threshold changed; returns (path, policy_id)."""
    document = {**POLICY_DOCUMENT}
    document.pop("policy_id", None)
    tiers = dict(document["tiers"])
    tiers["balanced"] = {
        **tiers["balanced"],
        "routes": [{"weight": 1.0, "models": ["small", "large"], "thresholds": [threshold]}],
    }
    policy = build_policy({**document, "tiers": tiers})
    path = tmp_path / name
    save_policy(policy, path)
    return path, policy.policy_id


def ask(gateway: Any, api_key: str = "none") -> Any:
    return gateway.client(api_key=api_key).chat.completions.with_raw_response.create(
        model="cascade", messages=MESSAGES
    )


def test_a_pushed_policy_switches_both_replicas(
    tmp_path, keys, sync_redis, make_settings, start_gateway, upstream
) -> None:
    first_path, first_id = policy_file(tmp_path, 0.5, "first.json")
    push_policy(sync_redis, load_policy(first_path), keys)
    replicas = [start_gateway(make_settings(policy=REDIS_URL)) for _ in range(2)]
    upstream.set_default("up-small", ok("Paris.", confidence=0.9))
    for replica in replicas:
        response = ask(replica)
        assert response.headers["x-cascade-policy"] == first_id
        assert response.headers["x-cascade-escalated"] == "false"

    second_path, second_id = policy_file(tmp_path, 0.999, "second.json")  # now the same answer escalates
    pushed_at = time.monotonic()
    assert push_policy(sync_redis, load_policy(second_path), keys) == 2
    # How fast replicas switch is measured in docs/operations.md; here only that they do (a hang
    # guard, not a time bound; the notification itself is tested in test_policy_store.py).
    while not all(r.gateway.policy.policy_id == second_id for r in replicas):
        assert time.monotonic() - pushed_at < 30.0, "a replica did not switch"
        time.sleep(0.005)
    for replica in replicas:
        response = ask(replica)
        assert response.headers["x-cascade-policy"] == second_id
        assert response.headers["x-cascade-escalated"] == "true"


def test_invalid_push_bypassing_the_cli_keeps_the_last_good_policy_and_is_counted(
    tmp_path, keys, sync_redis, make_settings, start_gateway
) -> None:
    path, good_id = policy_file(tmp_path, 0.5)
    push_policy(sync_redis, load_policy(path), keys)
    gateway = start_gateway(make_settings(policy=REDIS_URL))
    sync_redis.set(keys.policy_current, '{"schema_version": 1}')
    sync_redis.publish(keys.policy_updates, str(sync_redis.incr(keys.policy_version)))
    deadline = time.monotonic() + 3
    while gateway.sample("cascade_policy_reload_failures_total") < 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert ask(gateway).headers["x-cascade-policy"] == good_id
    ready = gateway.readiness().json()
    assert ready["policy_id"] == good_id and ready["policy_reload_failures"] == 1


def test_wrong_or_missing_key_is_an_openai_authentication_error(
    monkeypatch, make_settings, start_gateway
) -> None:
    monkeypatch.setenv("CASCADE_API_KEYS", "sk-alpha, sk-beta")
    gateway = start_gateway(make_settings())
    with pytest.raises(openai.AuthenticationError) as caught:
        ask(gateway, api_key="sk-wrong")
    assert caught.value.status_code == 401
    error = caught.value.response.json()["error"]
    assert error["code"] == "invalid_api_key" and error["type"] == "invalid_request_error"
    assert "sk-wrong" not in caught.value.response.text
    body = {"model": "cascade", "messages": MESSAGES}
    missing = gateway.http.post("/v1/chat/completions", json=body)
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "missing_api_key"
    assert ask(gateway, api_key="sk-beta").parse().choices[0].message.content


def test_redis_key_and_its_spend_limit_are_enforced_by_the_app(
    keys, sync_redis, make_settings, start_gateway, upstream
) -> None:
    # Worst case reserved per cascade request (no max_tokens: 4,096 completion tokens assumed) =
    # small (~0.00082 USD at 0.2 USD/Mtok output) + large (0.001 per query) ~ 0.0018 USD.
    key, _ = add_key(sync_redis, "team-a", 0.0025, keys)
    gateway = start_gateway(make_settings(redis_url=REDIS_URL))
    upstream.set_default("up-small", ok("Paris.", confidence=0.99))
    for _ in range(5):  # accepted answers cost 2e-6 each: settling releases the rest of the reservation
        assert ask(gateway, api_key=key).headers["x-cascade-escalated"] == "false"
    upstream.set_default("up-small", ok("Lyon?", confidence=0.3))
    assert ask(gateway, api_key=key).headers["x-cascade-escalated"] == "true"  # spends ~0.001
    with pytest.raises(openai.RateLimitError) as caught:
        ask(gateway, api_key=key)
    assert caught.value.response.json()["error"]["code"] == "budget_exceeded"
    assert int(caught.value.response.headers["retry-after"]) >= 1
    assert gateway.sample("cascade_budget_rejections_total") == 1


def test_admin_reload_needs_the_admin_key_and_reports_an_invalid_policy(
    tmp_path, monkeypatch, write_policy, make_settings, start_gateway
) -> None:
    monkeypatch.setenv("CASCADE_ADMIN_KEY", "sk-admin")
    path, first_id = policy_file(tmp_path, 0.5)
    gateway = start_gateway(make_settings(policy=path))
    url = "/admin/reload"
    assert gateway.http.post(url).status_code == 401
    assert gateway.http.post(url, headers={"Authorization": "Bearer sk-client"}).status_code == 401
    admin = {"Authorization": "Bearer sk-admin"}
    reloaded = gateway.http.post(url, headers=admin)
    assert reloaded.status_code == 200 and reloaded.json()["policy_id"] == first_id

    path.write_text("{ broken")
    rejected = gateway.http.post(url, headers=admin)
    assert rejected.status_code == 422
    assert rejected.json()["error"]["code"] == "policy_invalid"
    assert f"still serving policy {first_id}" in rejected.json()["error"]["message"]
    assert gateway.gateway.policy.policy_id == first_id

    _, second_id = policy_file(tmp_path, 0.7)  # same path, now valid
    accepted = gateway.http.post(url, headers=admin)
    assert accepted.status_code == 200 and accepted.json()["policy_id"] == second_id


def test_redis_outage_keeps_serving_and_readiness_and_metrics_say_so(
    tmp_path, keys, sync_redis, make_settings, start_gateway
) -> None:
    path, good_id = policy_file(tmp_path, 0.5)
    push_policy(sync_redis, load_policy(path), keys)
    link = ThreadedRedisLink()
    link.up()
    try:
        gateway = start_gateway(make_settings(policy=link.url))
        ready = gateway.readiness().json()
        assert ready["redis"] is True and ready["policy_stale"] is False
        assert gateway.sample("cascade_redis_up") == 1
        link.down()
        assert until(lambda: gateway.readiness().json()["redis"] is False)  # the 1 s health check
        ready = gateway.readiness()
        assert ready.status_code == 200  # still ready: it serves the last good policy
        assert ready.json()["policy_stale"] is True
        assert ready.json()["policy_id"] == good_id
        assert gateway.sample("cascade_redis_up") == 0
        assert ask(gateway).headers["x-cascade-policy"] == good_id  # still serving
        # A push during the outage is picked up once Redis is back.
        new_path, new_id = policy_file(tmp_path, 0.6, "new.json")
        push_policy(sync_redis, load_policy(new_path), keys)
        link.up()
        deadline = time.monotonic() + 5
        while gateway.gateway.policy.policy_id != new_id:
            assert time.monotonic() < deadline, "did not catch up after Redis came back"
            time.sleep(0.02)
        assert until(lambda: gateway.readiness().json()["redis"] is True)
    finally:
        link.close()
