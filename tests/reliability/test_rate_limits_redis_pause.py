"""A key's rate limit through a Redis hiccup, under two replicas (real gateway apps, in process) on a
private redis-server: the Redis cases of the fault matrix's limit cases (``fault_matrix.REDIS_FAULTS``).

The outage rule (gateway.keys.outage, docs/contracts.md): a failed Redis call is tried again, and a
replica decides in process (degraded mode) only once Redis has been silent for
``budgets.outage_after_s`` (0.5 s). So a pipeline past ``redis_timeout_s`` (0.1 s) or a 250 ms pause
leaves every admission to Redis (the limit is exact, no replica degrades), and a Redis frozen past
the rule holds the limit within one in-flight request per replica: each replica counts on from
what Redis last said, within its share of the headroom; on recovery what it admitted is added to
Redis's count. Each burst: 4 requests one by one through Redis, then the fault, then the rest at
once, round-robin over the two replicas.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from processes import RedisServer
from spend_support import wait_until

from tests.reliability.redis_pause import (
    all_live,
    burst,
    client_pause,
    degraded_entries,
    fallbacks,
    in_one_window,
    rate_requests,
    rated_replicas,
)
from tests.support import fault_matrix as fm
from tests.support.in_process_gateway import InProcessGateway
from tests.support.scripted_upstream import ScriptedUpstream

KEY = "sk-reliability-pause"
RPM = 10
BEFORE = 4  # requests admitted through Redis before the fault (mid-window)
# Requests per fault: within the limit for the slow pipeline (all must pass), four times it else.
REQUESTS = {"slow_pipeline": RPM, "pause_250ms": 4 * RPM, "frozen_past_outage_rule": 4 * RPM}


@pytest.fixture
def replicas(
    redis_server: RedisServer, upstream: ScriptedUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[InProcessGateway]]:
    """Two replicas at the default ``redis_timeout_s`` (0.1 s) and outage rule (0.5 s), each
    knowing the other is live."""
    monkeypatch.setenv("CASCADE_API_KEYS", KEY)
    monkeypatch.delenv("CASCADE_REDIS_PREFIX", raising=False)
    started = rated_replicas(2, redis_server.url, upstream, tmp_path, requests=RPM, logging={"level": "info"})
    try:
        assert all_live(started), "the replicas never saw each other's heartbeat"
        yield started
    finally:
        for replica in started:
            replica.stop()


def start_fault(fault: str, redis_server: RedisServer) -> None:
    if fault == "slow_pipeline":
        client_pause(redis_server, 0.15)  # one call past the 0.1 s timeout
    elif fault == "pause_250ms":
        client_pause(redis_server, 0.25)
    else:
        redis_server.freeze()  # thawed once the burst was decided


@pytest.mark.parametrize("fault", fm.REDIS_FAULTS)
def test_a_redis_hiccup_mid_window_holds_the_rate_limit_within_one_request_per_replica(
    replicas: list[InProcessGateway], redis_server: RedisServer, caplog: pytest.LogCaptureFixture, fault: str
) -> None:
    in_one_window()
    with caplog.at_level(logging.INFO, logger="cascade"):
        statuses = burst(
            replicas, KEY, REQUESTS[fault], before=BEFORE, pause=lambda: start_fault(fault, redis_server)
        )
        if redis_server.frozen:
            redis_server.thaw()
        admitted = statuses.count(200)
        assert statuses.count(429) == len(statuses) - admitted, statuses
        # Recovered: the timed-out reservations cancelled, the local admissions written back.
        assert wait_until(lambda: rate_requests(redis_server, KEY) == admitted, timeout_s=10), (
            rate_requests(redis_server, KEY),
            admitted,
        )
        assert wait_until(lambda: all(r.sample("cascade_limits_degraded") == 0 for r in replicas))
    events = [record.getMessage() for record in caplog.records]
    degraded = sum(map(degraded_entries, replicas))
    bound = RPM if fault != "frozen_past_outage_rule" else RPM + len(replicas)
    fm.RECORD.add_limit(f"redis-{fault}", admitted <= bound)
    assert admitted <= bound, (admitted, bound, statuses)
    if fault == "frozen_past_outage_rule":
        # Each replica entered degraded mode once, said so and said when it left it.
        assert degraded == 2 and events.count("limits_degraded") == 2, events
        assert events.count("limits_recovered") == 2, events
        assert sum(map(fallbacks, replicas)) == REQUESTS[fault] - BEFORE
        return
    # Shorter than the outage rule: a call did time out, yet Redis decided every request.
    assert "spend_store_failed" in events
    assert degraded == 0 and "limits_degraded" not in events
    assert sum(map(fallbacks, replicas)) == 0
    assert admitted == min(RPM, REQUESTS[fault])
