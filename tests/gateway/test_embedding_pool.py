"""The ``minilm-v1`` embedding pool heals (gateway.routing.embedding_pool).

Through the app: its real worker process is killed (SIGKILL, as the OOM killer does) and the
routed tier answers routed again once the replacement has loaded the model, the restart counted
and logged. The pool itself: a worker that dies at every start (``os.abort`` as its initializer)
is restarted once at once, then not again before its backoff: no spin; a pool first needed after
boot (a pushed policy) warms without making the replica unready.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

import pytest

from gateway.routing.embedding_pool import EmbeddingPool
from gateway.wire.logs import LOGGER_NAME
from tests.support.gateway_testkit import until
from tests.support.routed_policy import EASY, minilm_policy
from tests.support.scripted_upstream import ok

FALLBACKS = "cascade_router_fallbacks_total"


def test_a_killed_embedding_worker_is_replaced_and_the_tier_routes_again(
    start_gateway: Any,
    make_settings: Any,
    write_policy: Any,
    upstream: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    running = start_gateway(make_settings(policy=minilm_policy(write_policy)))
    assert until(lambda: running.readiness().status_code == 200, timeout_s=90.0)
    running.gateway.router_runtime.embeddings.timeout_s = 30.0  # a loaded machine embeds slowly
    upstream.set_default("up-small", ok("4", confidence=0.99))
    client = running.client()

    def mechanism() -> str:
        reply = client.chat.completions.with_raw_response.create(model="cascade/balanced", messages=EASY)
        return str(reply.headers["x-cascade-mechanism"])

    assert mechanism() == "routed"
    (worker,) = running.readiness().json()["embeddings"]["workers"]
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        os.kill(worker, signal.SIGKILL)
        assert mechanism() == "fallback"  # the request that finds the worker dead: the cascade
        assert until(lambda: mechanism() == "routed", timeout_s=90.0)  # the replacement is warm

    embeddings = running.readiness().json()["embeddings"]
    assert embeddings["state"] == "ready" and embeddings["restarts"] == 1
    assert len(embeddings["workers"]) == 1 and embeddings["workers"] != [worker]
    assert running.sample("cascade_embedding_pool_restarts_total") == 1.0
    assert running.sample("cascade_embedding_pool_warm") == 1.0
    assert running.sample(FALLBACKS, tier="balanced", reason="warming") >= 1.0  # not "error" for good
    events = [r.getMessage() for r in caplog.records if r.getMessage().startswith("embedding_pool")]
    assert events == [
        "embedding_pool_broken",
        "embedding_pool_restarting",
        "embedding_pool_warming",
        "embedding_pool_warm",
    ]


async def test_a_worker_that_dies_at_every_start_is_restarted_at_a_bounded_rate() -> None:
    pool = EmbeddingPool(initializer=os.abort, restart_backoff_s=60.0)
    pool.start()
    try:
        assert pool.booting
        assert not await pool.wait_warm()
        assert not pool.booting  # a failed warm-up does not hold readiness: the cascade serves
        assert pool.state == "down"
        assert await pool.embed("x") == (None, "warming")  # the first restart is at once
        assert pool.restart_count == 1
        assert not await pool.wait_warm()
        for _ in range(5):
            assert await pool.embed("x") == (None, "error")  # the next waits its backoff
        assert pool.restart_count == 1
    finally:
        pool.close()


async def test_a_pool_first_needed_after_boot_warms_without_holding_readiness() -> None:
    pool = EmbeddingPool(initializer=os.getpid)  # a worker that loads nothing: started at once
    try:
        assert await pool.embed("x") == (None, "warming")  # a pushed policy's first minilm request
        assert not pool.booting  # the replica serving already stays ready
        assert await pool.wait_warm()
        assert pool.status()["state"] == "ready" and len(pool.status()["workers"]) == 1
    finally:
        pool.close()
    assert await pool.embed("x") == (None, "error")  # closed: never started again
