"""The reliability fixtures themselves: a private Redis that can die, freeze and come back empty,
and real replicas sharing it."""

from __future__ import annotations

import pytest
import redis
from processes import RedisServer, spend_counter_nano, true_cost_usd

from tests.support.gateway_process import GatewayProcess
from tests.support.scripted_upstream import ScriptedUpstream, ok

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def test_private_redis_restarts_empty_and_freezes(redis_server: RedisServer) -> None:
    client = redis_server.client()
    client.set("k", "v")
    redis_server.freeze()
    with pytest.raises(redis.TimeoutError):
        redis_server.client().get("k")
    redis_server.thaw()
    assert client.get("k") == b"v"
    redis_server.restart()
    assert redis_server.client().get("k") is None


def test_two_replicas_share_one_spend_counter(
    start_replicas, redis_server: RedisServer, upstream: ScriptedUpstream
) -> None:
    upstream.set_default("up-large", ok(usage=(20, 10)))
    replicas: list[GatewayProcess] = start_replicas(
        2, redis=redis_server, env={"CASCADE_API_KEYS": "sk-a"}, budgets={"limit_usd": 10.0}
    )
    for replica in replicas:
        replica.client("sk-a").chat.completions.create(model="large", messages=MESSAGES, max_tokens=10)
    spent = spend_counter_nano(redis_server.client(), "sk-a")
    assert spent == round(true_cost_usd(upstream.produced) * 1e9) > 0
