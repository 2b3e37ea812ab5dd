"""`cascade policy push|show` and `cascade keys add|list|revoke` against the real Redis."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cascade_cli.main import app
from gateway.keys.auth import hash_key
from policies import build_policy, save_policy
from tests.support.policy_files import two_model_document
from tests.support.shared_redis import REDIS_URL

runner = CliRunner()


@pytest.fixture
def policy_file(tmp_path: Path, policy_document: dict[str, Any]) -> Path:
    path = tmp_path / "policy.json"
    save_policy(build_policy(policy_document), path)
    return path


@pytest.fixture
def policy_document() -> dict[str, Any]:
    return two_model_document()


def next_message(pubsub: Any, timeout_s: float = 2.0) -> str | None:
    """The next published payload (the subscribe confirmation is skipped by the pubsub)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.1)
        if message is not None:
            return message["data"]
    return None


def cli(*args: str, prefix: str) -> Any:
    return runner.invoke(app, [*args, "--redis", REDIS_URL, "--prefix", prefix])


def test_push_stores_the_policy_bumps_the_version_and_publishes(policy_file, keys, sync_redis) -> None:
    pubsub = sync_redis.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(keys.policy_updates)
    result = cli("policy", "push", str(policy_file), prefix=keys.prefix)
    assert result.exit_code == 0, result.output
    policy_id = json.loads(policy_file.read_text())["policy_id"]
    assert result.stdout.strip() == policy_id
    assert json.loads(sync_redis.get(keys.policy_current))["policy_id"] == policy_id
    assert sync_redis.get(keys.policy_version) == "1"
    assert next_message(pubsub) == "1"
    assert cli("policy", "push", str(policy_file), prefix=keys.prefix).exit_code == 0
    assert sync_redis.get(keys.policy_version) == "2"
    pubsub.close()


def test_push_refuses_an_invalid_policy_and_leaves_redis_alone(tmp_path: Path, keys, sync_redis) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1}')
    result = cli("policy", "push", str(bad), prefix=keys.prefix)
    assert result.exit_code == 1
    assert "error:" in result.output and "Traceback" not in result.output
    assert sync_redis.get(keys.policy_current) is None
    assert sync_redis.get(keys.policy_version) is None


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ("NaN-threshold", "finite"),
        ("edited-after-stamping", "does not match"),
        ("repeated-envelope-model", "repeat"),
    ],
)
def test_push_of_a_bad_file_is_one_line_and_leaves_redis_alone(
    tmp_path: Path, policy_document, keys, sync_redis, content: str, fragment: str
) -> None:
    path = tmp_path / "bad.json"
    document = build_policy(policy_document).model_dump(mode="json")
    if content == "NaN-threshold":
        document["tiers"]["balanced"]["routes"][0]["thresholds"] = [float("nan")]
        content = json.dumps(document)  # Python writes the NaN literal, as a hand edit might
    elif content == "edited-after-stamping":
        document["tiers"]["balanced"]["routes"][0]["thresholds"] = [0.9]
        content = json.dumps(document)
    elif content == "repeated-envelope-model":
        document["envelope"] = [
            {"cost_usd": 0.001, "quality": 0.8, "models": ["large", "large"], "thresholds": [0.5]}
        ]
        content = json.dumps(document)
    path.write_text(content)
    result = cli("policy", "push", str(path), prefix=keys.prefix)
    assert result.exit_code == 1
    output = result.output.strip()
    assert output.startswith("error: ") and fragment in output, output
    assert len(output.splitlines()) == 1 and "Traceback" not in output
    assert sync_redis.get(keys.policy_current) is None


def test_push_over_a_corrupt_version_restarts_it_at_one(policy_file, keys, sync_redis) -> None:
    sync_redis.set(keys.policy_version, "not-a-number")
    result = cli("policy", "push", str(policy_file), prefix=keys.prefix)
    assert result.exit_code == 0, result.output
    assert sync_redis.get(keys.policy_version) == "1"
    assert json.loads(sync_redis.get(keys.policy_current))["policy_id"] == result.stdout.strip()


def test_push_refuses_the_external_scorer(tmp_path: Path, policy_document, keys) -> None:
    path = tmp_path / "external.json"
    save_policy(build_policy({**policy_document, "scorer": {"name": "external"}}), path)
    result = cli("policy", "push", str(path), prefix=keys.prefix)
    assert result.exit_code == 1 and "external" in result.output


def test_push_to_an_unreachable_redis_is_one_red_line() -> None:
    result = runner.invoke(app, ["policy", "show", "--redis", "redis://127.0.0.1:1/0"])
    assert result.exit_code == 1
    assert "cannot reach Redis" in result.output and "Traceback" not in result.output


def test_show_prints_id_version_and_tiers(policy_file, keys) -> None:
    assert cli("policy", "push", str(policy_file), prefix=keys.prefix).exit_code == 0
    result = cli("policy", "show", prefix=keys.prefix)
    assert result.exit_code == 0
    policy_id = json.loads(policy_file.read_text())["policy_id"]
    assert f"policy_id   {policy_id}" in result.stdout
    assert "version     1" in result.stdout
    assert "tier balanced: 1x small -> large @ 0.4" in result.stdout
    as_json = cli("policy", "show", "--json", prefix=keys.prefix)
    assert json.loads(as_json.stdout)["policy_id"] == policy_id


def test_show_without_a_pushed_policy_fails_clearly(keys) -> None:
    result = cli("policy", "show", prefix=keys.prefix)
    assert result.exit_code == 1 and "cascade policy push" in result.output


def test_keys_add_prints_the_key_once_and_stores_only_its_hash(keys, sync_redis) -> None:
    result = cli("keys", "add", "team-a", "--limit-usd", "2.5", prefix=keys.prefix)
    assert result.exit_code == 0, result.output
    key = result.stdout.strip()
    assert key.startswith("sk-cascade-") and len(key) > 40
    stored = sync_redis.hgetall(keys.client_keys)
    assert list(stored) == [hash_key(key)]
    assert json.loads(stored[hash_key(key)])["limit_usd"] == 2.5
    assert key not in json.dumps(stored)
    listed = cli("keys", "list", prefix=keys.prefix)
    assert "team-a" in listed.stdout and key not in listed.stdout
    assert cli("keys", "add", "team-a", prefix=keys.prefix).exit_code == 1  # names are unique
    assert cli("keys", "revoke", "team-a", prefix=keys.prefix).exit_code == 0
    assert sync_redis.hlen(keys.client_keys) == 0


def test_show_prints_each_kind_sections_tiers_and_held_out_expectations(
    tmp_path: Path, policy_document: dict[str, Any], keys: Any
) -> None:
    heldout = {
        "splits": 50,
        "test_fraction": 0.5,
        "cost_usd": {"mean": 0.0005, "low": 0.0004, "high": 0.0006},
        "quality": {"mean": 0.66, "low": 0.6, "high": 0.72},
        "escalation_rate": {"mean": 0.41, "low": 0.35, "high": 0.47},
    }
    policy_document["tiers"]["balanced"]["expected"]["heldout"] = heldout
    section = json.loads(json.dumps(policy_document))
    section["tiers"]["balanced"]["routes"][0]["models"] = ["large"]
    section["tiers"]["balanced"]["routes"][0]["thresholds"] = []
    section["scorer"] = {"name": "min_probability", "top_k": 5}
    path = tmp_path / "kinds.json"
    save_policy(build_policy({**policy_document, "kinds": {"tool_call": section}}), path)
    assert cli("policy", "push", str(path), prefix=keys.prefix).exit_code == 0
    shown = cli("policy", "show", prefix=keys.prefix).stdout
    assert "held out over 50 splits: cost $0.0005, quality 0.660 [0.600, 0.720], escalation 41.0%" in shown
    assert "kind tool_call (scorer min_probability):\n  tier balanced: 1x large  (expected" in shown
