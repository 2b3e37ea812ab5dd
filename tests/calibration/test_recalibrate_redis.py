"""``cascade recalibrate`` replaces the served policy only if it is still the one it compared with."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from calibration.recalibration.redis_io import RedisPolicyError, push_if_unchanged, read_served
from policies import build_policy, dump_policy
from publishing import PolicyKeys
from tests.support.policy_files import two_model_document
from tests.support.shared_redis import REDIS_URL
from traffic.redis_connect import connect_sync

# keys (a private Redis prefix): conftest.py.
DOCUMENT: dict[str, Any] = two_model_document()


class InterleavedPush:
    """The real client, but another writer pushes between the WATCHed read and the transaction."""

    def __init__(self, client: Any, keys: PolicyKeys, intruder_text: str) -> None:
        self.client, self.keys, self.intruder_text = client, keys, intruder_text

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def pipeline(self, transaction: bool = True) -> Any:
        pipe = self.client.pipeline(transaction=transaction)
        real_multi = pipe.multi

        def multi() -> None:
            other = redis.Redis.from_url(REDIS_URL, decode_responses=True)
            other.set(self.keys.policy_current, self.intruder_text)
            other.close()
            real_multi()

        pipe.multi = multi
        return pipe


def test_a_policy_pushed_meanwhile_is_not_overwritten(keys: PolicyKeys) -> None:
    client = connect_sync(REDIS_URL)
    served = build_policy(DOCUMENT)
    client.set(keys.policy_current, dump_policy(served))
    text, policy = read_served(client, keys)
    assert policy is not None and policy.policy_id == served.policy_id
    new = build_policy({**DOCUMENT, "default_tier": "balanced", "allow_degraded": False})
    intruder = build_policy({**DOCUMENT, "on_missing_score": "accept"})

    with pytest.raises(RedisPolicyError, match="changed during recalibration"):
        push_if_unchanged(InterleavedPush(client, keys, dump_policy(intruder)), new, keys, text)
    assert client.get(keys.policy_current) == dump_policy(intruder)  # the other writer's push stands

    with pytest.raises(RedisPolicyError, match=f"now policy {intruder.policy_id}"):
        push_if_unchanged(client, new, keys, text)  # changed before the push started
    client.close()


def test_an_unreadable_served_policy_is_an_error(keys: PolicyKeys) -> None:
    client = connect_sync(REDIS_URL)
    client.set(keys.policy_current, "{not json")
    with pytest.raises(RedisPolicyError, match="the served policy cannot be read"):
        read_served(client, keys)
    client.close()
