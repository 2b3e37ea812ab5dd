"""Two real `cascade serve` replicas sharing the real Redis: no policy content can wedge them.

Reproductions of issue defects 3 (the policy watcher died on a 100,000-deep JSON policy or a
non-integer version; /admin/reload answered 500; a replica failed to start) and 4 (after Redis lost
its data the version restarted at 1 and replicas kept serving the old policy), and of the design
risk "an empty key store after data loss opens the gateway".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from policy_support import DEEP_JSON, Replica, admin_headers, make_policy, wait_for

from gateway.commands.keys import add_key
from gateway.redis.keys import RedisKeys
from policies import Policy, load_policy, save_policy
from publishing import push_policy
from tests.support.shared_redis import delete_prefix


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[list[Replica]]:
    """Started replicas are appended by the test; every one is stopped afterwards."""
    started: list[Replica] = []
    yield started
    for replica in started:
        replica.stop()


def push(client: redis.Redis, keys: RedisKeys, policy: Policy, tmp_path: Path) -> int:
    """`cascade policy push` of ``policy``; returns the version."""
    path = tmp_path / f"{policy.policy_id}.json"
    save_policy(policy, path)
    return push_policy(client, load_policy(path), keys)


def serving(replicas: list[Replica], policy: Policy) -> bool:
    return all(r.policy_id() == policy.policy_id for r in replicas)


def test_deep_policy_and_non_integer_version_never_stop_the_watchers(
    tmp_path: Path, upstream_url: str, keys: RedisKeys, client: redis.Redis, replicas: list[Replica]
) -> None:
    first = make_policy(0.4)
    push(client, keys, first, tmp_path)
    replicas += [Replica(tmp_path, upstream_url, keys, f"r{i}") for i in range(2)]
    assert serving(replicas, first)

    # Someone stores a 100,000-deep JSON document (bypassing the CLI) and announces it.
    client.set(keys.policy_current, DEEP_JSON)
    client.publish(keys.policy_updates, str(client.incr(keys.policy_version)))
    for replica in replicas:
        wait_for(lambda r=replica: r.metric("cascade_policy_reload_failures_total") == 1, 5, "counted")
        details = replica.details()
        assert "nested too deeply" in details["policy_last_error"]
        assert details["policy_id"] == first.policy_id and details["policy_watching"] is True
        assert replica.ready().status_code == 200  # still serving the last good policy
        response = replica.ask()
        assert response.status_code == 200 and response.headers["x-cascade-policy"] == first.policy_id
        reload = httpx.post(replica.url + "/admin/reload", headers=admin_headers(), timeout=5)
        assert reload.status_code == 422, reload.text  # an OpenAI error, not a 500
        assert set(reload.json()["error"]) == {"message", "type", "param", "code"}
        assert "deeply" in replica.log()  # logged

    # A valid policy under a version that is not an integer: served by content, the version reported.
    second = make_policy(0.6)
    client.set(keys.policy_current, second.model_dump_json())
    client.set(keys.policy_version, "not-a-number")
    wait_for(lambda: serving(replicas, second), 5, "switched despite the corrupt version")
    for replica in replicas:
        details = replica.details()
        assert "not an integer" in details["policy_last_error"] and details["policy_version"] is None
        assert replica.metric("cascade_policy_reload_failures_total") == 2

    # The watchers are alive: the next push (which restarts the version at 1) reaches both.
    third = make_policy(0.7)
    assert push(client, keys, third, tmp_path) == 1
    wait_for(lambda: serving(replicas, third), 3, "both replicas on the next push")
    assert all(r.alive() for r in replicas)
    for replica in replicas:
        assert replica.details()["policy_last_error"] is None
        for line in replica.log().splitlines():
            json.loads(line)  # every log line of the process, uvicorn's included, is JSON


def test_a_replica_starting_against_bad_content_starts_not_ready_and_serves_the_next_push(
    tmp_path: Path, upstream_url: str, keys: RedisKeys, client: redis.Redis, replicas: list[Replica]
) -> None:
    client.set(keys.policy_current, DEEP_JSON)
    client.set(keys.policy_version, "x")
    replicas.append(Replica(tmp_path, upstream_url, keys, "late"))
    replica = replicas[0]
    not_ready = replica.ready()
    assert not_ready.status_code == 503 and not_ready.json() == {"ready": False}  # no error text
    assert "nested too deeply" in replica.details()["policy_last_error"]
    refused = replica.ask()
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "policy_unavailable"
    good = make_policy(0.5)
    push(client, keys, good, tmp_path)
    wait_for(lambda: replica.ready().status_code == 200, 3, "ready after a good push")
    assert replica.ask().headers["x-cascade-policy"] == good.policy_id


def test_after_redis_loses_its_data_replicas_follow_the_content_not_the_version(
    tmp_path: Path, upstream_url: str, keys: RedisKeys, client: redis.Redis, replicas: list[Replica]
) -> None:
    first = make_policy(0.4)
    assert push(client, keys, first, tmp_path) == 1
    replicas += [Replica(tmp_path, upstream_url, keys, f"r{i}") for i in range(2)]
    assert serving(replicas, first)

    # Redis loses its data; the replicas keep serving the last good policy and stay ready.
    delete_prefix(keys)  # Redis lost this deployment's data
    wait_for(
        lambda: all("no policy" in (r.details()["policy_last_error"] or "") for r in replicas),
        3,
        "the empty store noticed",
    )
    assert serving(replicas, first) and all(r.ready().status_code == 200 for r in replicas)

    # A new push starts again at version 1, the version the replicas already served.
    second = make_policy(0.6)
    assert push(client, keys, second, tmp_path) == 1
    wait_for(lambda: serving(replicas, second), 3, "switched to the re-pushed policy")

    # Worst case: the loss and a re-push of other content land between two checks (one transaction,
    # no pub/sub message): the version stays 1 throughout, only the content tells.
    third = make_policy(0.8)
    pipe = client.pipeline(transaction=True)
    pipe.delete(keys.policy_current, keys.policy_version)
    pipe.set(keys.policy_current, third.model_dump_json())
    pipe.set(keys.policy_version, 1)
    pipe.execute()
    wait_for(lambda: serving(replicas, third), 3, "switched by content under the same version")
    assert all(r.details()["policy_version"] == 1 for r in replicas)
    for replica in replicas:
        assert replica.ask().headers["x-cascade-policy"] == third.policy_id


def test_after_redis_loses_its_keys_no_replica_becomes_open(
    tmp_path: Path, upstream_url: str, keys: RedisKeys, client: redis.Redis, replicas: list[Replica]
) -> None:
    push(client, keys, make_policy(0.4), tmp_path)
    key, _ = add_key(client, "team-a", None, keys)
    closed = {"auth": {"open": False}}
    replicas.append(Replica(tmp_path, upstream_url, keys, "before", **closed))
    assert replicas[0].ask(key).status_code == 200
    assert replicas[0].ask("sk-unknown").status_code == 401

    delete_prefix(keys)  # Redis lost this deployment's data
    push(client, keys, make_policy(0.4), tmp_path)  # the policy comes back; the keys do not
    replicas.append(Replica(tmp_path, upstream_url, keys, "after", **closed))
    after = replicas[1]
    assert after.ready().status_code == 200  # it can serve, but only to callers with a key
    for replica in replicas:
        # The old key is gone from Redis (replicas cache a key for 5 s), and no key opens nothing.
        wait_for(lambda r=replica: r.ask(key).status_code == 401, 8, "revoked by the data loss")
        assert replica.ask("none").status_code == 401
        no_header = httpx.post(replica.url + "/v1/chat/completions", json={"model": "cascade"}, timeout=5)
        assert no_header.status_code == 401
    assert "auth.open is false" in after.log()  # says why every request is refused
