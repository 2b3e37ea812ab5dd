"""Publishing a policy in the real Redis (127.0.0.1:6379): unconditional and conditional pushes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from policies import PolicyInvalidError, build_policy, dump_policy
from publishing import PolicyChangedError, PolicyKeys, push_policy, read_current
from tests.support.shared_redis import REDIS_URL


@pytest.fixture
def keys() -> Iterator[PolicyKeys]:
    keys = PolicyKeys(f"cascade-test-{uuid.uuid4().hex[:12]}")
    yield keys
    client = redis.Redis.from_url(REDIS_URL)
    client.delete(keys.policy_current, keys.policy_version)
    client.close()


@pytest.fixture
def client() -> Iterator[Any]:
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    yield client
    client.close()


def test_a_push_stores_the_policy_bumps_the_version_and_publishes(
    client: Any, keys: PolicyKeys, policy_document: dict[str, Any]
) -> None:
    policy = build_policy(policy_document)
    pubsub = client.pubsub()
    pubsub.subscribe(keys.policy_updates)
    pubsub.get_message(timeout=1)  # the subscribe confirmation
    assert push_policy(client, policy, keys) == 1
    assert read_current(client, keys) == dump_policy(policy)
    message = pubsub.get_message(timeout=2)
    pubsub.close()
    assert message is not None and message["data"] == "1"


def test_a_conditional_push_replaces_only_the_policy_it_was_told_about(
    client: Any, keys: PolicyKeys, policy_document: dict[str, Any]
) -> None:
    first = build_policy(policy_document)
    second = build_policy({**policy_document, "default_tier": "economy"})
    assert push_policy(client, first, keys, replacing=None) == 1  # none stored: as expected
    with pytest.raises(PolicyChangedError, match=f"now policy {first.policy_id}"):
        push_policy(client, second, keys, replacing=None)
    stale = dump_policy(second)
    with pytest.raises(PolicyChangedError):
        push_policy(client, second, keys, replacing=stale)
    assert read_current(client, keys) == dump_policy(first)
    assert push_policy(client, second, keys, replacing=dump_policy(first)) == 2
    assert read_current(client, keys) == dump_policy(second)


def test_a_corrupt_version_restarts_at_one_in_a_conditional_push_too(
    client: Any, keys: PolicyKeys, policy_document: dict[str, Any]
) -> None:
    client.set(keys.policy_version, "not-a-number")
    assert push_policy(client, build_policy(policy_document), keys, replacing=None) == 1
    assert client.get(keys.policy_version) == "1"


def test_a_policy_that_cannot_be_served_is_never_stored(
    client: Any, keys: PolicyKeys, policy_document: dict[str, Any]
) -> None:
    edited = build_policy(policy_document).model_copy(update={"default_tier": "economy"})  # id is stale
    with pytest.raises(PolicyInvalidError, match="does not match the policy's content"):
        push_policy(client, edited, keys)
    assert read_current(client, keys) is None
