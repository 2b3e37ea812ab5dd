"""`cascade policy push` (the CLI, as a process) and real replicas sharing the real Redis: a policy
that cannot be served never reaches Redis, and one written there by hand is refused by every replica.

Reproductions of issue 16 defects 9 (push accepted a policy routing to a model the gateway lacks:
replicas rejected it and a replica started afterwards had no policy) and 10 (thresholds outside the
scorer's range, 2.0 or -5.0, were accepted and served: 2.0 escalates every answer).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from policy_support import CASCADE, Replica, make_policy, wait_for

from gateway.redis.keys import RedisKeys
from policies import Policy, build_policy, save_policy
from policies.store import compute_policy_id
from tests.support.shared_redis import REDIS_URL


@pytest.fixture
def replicas() -> Iterator[list[Replica]]:
    started: list[Replica] = []
    yield started
    for replica in started:
        replica.stop()


def cli_push(path: Path, keys: RedisKeys, *extra: str) -> subprocess.CompletedProcess[str]:
    """`cascade policy push PATH --redis ... [extra]` as a process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    env["CASCADE_REDIS_PREFIX"] = keys.prefix
    return subprocess.run(
        [CASCADE, "policy", "push", str(path), "--redis", REDIS_URL, *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def saved(policy: Policy, directory: Path) -> Path:
    path = directory / f"{policy.policy_id}.json"
    save_policy(policy, path)
    return path


def routing_to_medium() -> Policy:
    """A valid policy whose only tier routes small -> medium; the replicas' config has no medium."""
    document = make_policy(0.4).model_dump(mode="json")
    for name in ("policy_id", "created_at", "score_distribution"):
        document.pop(name, None)
    document["models"]["medium"] = document["models"].pop("large")
    document["tiers"]["balanced"]["routes"][0]["models"] = ["small", "medium"]
    document["envelope"][0]["models"] = ["small", "medium"]
    return build_policy(document)


def stamped_with_threshold(policy: Policy, threshold: float) -> str:
    """``policy``'s JSON with every threshold set to ``threshold`` and ``policy_id`` re-stamped: what
    a hand edit looks like (no validation on the way)."""
    document = policy.model_dump(mode="json", exclude_none=True)
    document["tiers"]["balanced"]["routes"][0]["thresholds"] = [threshold]
    document["envelope"][0]["thresholds"] = [threshold]
    document["policy_id"] = compute_policy_id(document)
    return json.dumps(document)


def test_push_with_the_config_refuses_a_policy_routing_to_an_unconfigured_model(
    tmp_path: Path, upstream_url: str, keys: RedisKeys, client: redis.Redis, replicas: list[Replica]
) -> None:
    good = make_policy(0.4)
    pushed = cli_push(saved(good, tmp_path), keys)
    assert pushed.returncode == 0, pushed.stderr
    replicas.append(Replica(tmp_path, upstream_url, keys, "r0"))
    config = tmp_path / "r0.yaml"  # the replicas' own config: models small and large

    refused = cli_push(saved(routing_to_medium(), tmp_path), keys, "--config", str(config))

    assert refused.returncode == 1, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "medium" in lines[0] and "does not define" in lines[0], refused.stderr
    assert refused.stdout == ""
    assert json.loads(client.get(keys.policy_current))["policy_id"] == good.policy_id  # nothing stored
    assert client.get(keys.policy_version) == "1"
    # The running replica and one started afterwards both serve the last good policy.
    replicas.append(Replica(tmp_path, upstream_url, keys, "r1"))
    for replica in replicas:
        assert replica.ready().status_code == 200
        assert replica.ask().headers["x-cascade-policy"] == good.policy_id
        assert replica.details()["policy_reload_failures"] == 0

    # A servable policy pushed with the config goes through without a warning.
    better = make_policy(0.6)
    accepted = cli_push(saved(better, tmp_path), keys, "--config", str(config))
    assert accepted.returncode == 0 and accepted.stdout.strip() == better.policy_id, accepted.stderr
    assert "warning" not in accepted.stderr
    wait_for(lambda: all(r.policy_id() == better.policy_id for r in replicas), 5, "replicas switched")


def test_push_without_a_config_says_the_models_were_not_checked(tmp_path: Path, keys: RedisKeys) -> None:
    pushed = cli_push(saved(routing_to_medium(), tmp_path), keys)
    assert pushed.returncode == 0, pushed.stderr
    warnings = [line for line in pushed.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "not checked" in warnings[0] and "--config" in warnings[0]


def test_a_bad_config_given_to_push_is_one_line_and_nothing_is_pushed(
    tmp_path: Path, keys: RedisKeys, client: redis.Redis
) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text("models: {}\npolicy: redis://127.0.0.1:6379/0\n")
    refused = cli_push(saved(make_policy(0.4), tmp_path), keys, "--config", str(config))
    assert refused.returncode == 1
    assert len(refused.stderr.strip().splitlines()) == 1 and "models" in refused.stderr
    assert client.get(keys.policy_current) is None


@pytest.mark.parametrize("threshold", [2.0, -5.0])
def test_a_threshold_outside_the_scorers_range_is_refused_by_push_and_by_every_replica(
    tmp_path: Path,
    upstream_url: str,
    keys: RedisKeys,
    client: redis.Redis,
    replicas: list[Replica],
    threshold: float,
) -> None:
    good = make_policy(0.4)
    assert cli_push(saved(good, tmp_path), keys).returncode == 0
    replicas += [Replica(tmp_path, upstream_url, keys, f"r{i}") for i in range(2)]
    bad_text = stamped_with_threshold(good, threshold)
    bad_path = tmp_path / "edited.json"
    bad_path.write_text(bad_text)

    refused = cli_push(bad_path, keys, "--config", str(tmp_path / "r0.yaml"))
    assert refused.returncode == 1
    (line,) = refused.stderr.strip().splitlines()
    assert "tier 'balanced' route 1 stage 1 (small)" in line
    assert f"threshold {threshold:g}" in line and "range [0, 1] of scorer mean_token_negentropy" in line
    assert json.loads(client.get(keys.policy_current))["policy_id"] == good.policy_id

    # Written straight into Redis (bypassing push): every replica refuses it and keeps the good one.
    client.set(keys.policy_current, bad_text)
    client.publish(keys.policy_updates, str(client.incr(keys.policy_version)))
    for replica in replicas:
        wait_for(lambda r=replica: r.details()["policy_reload_failures"] == 1, 5, "the edit refused")
        details = replica.details()
        assert "outside the range" in details["policy_last_error"]
        assert details["policy_id"] == good.policy_id
        assert replica.ask().headers["x-cascade-policy"] == good.policy_id
