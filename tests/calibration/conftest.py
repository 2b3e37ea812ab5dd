"""Fixtures of the ``cascade recalibrate`` tests that push to the real Redis."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from publishing import PolicyKeys
from tests.support.shared_redis import REDIS_URL, delete_prefix, fresh_prefix


@pytest.fixture
def keys() -> Iterator[PolicyKeys]:
    """Policy key names under a prefix no other test uses, deleted afterwards."""
    keys = PolicyKeys(fresh_prefix())
    yield keys
    delete_prefix(keys.prefix)


@pytest.fixture
def client() -> Iterator[Any]:
    """A client of the real Redis that decodes replies to text."""
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    yield client
    client.close()
