"""Rate limits across two real replicas sharing one Redis: a burst of 200 requests from one key
never passes its requests-per-window limit, and its tokens pass the token limit by at most what one
in-flight request can add (its reserved worst case). The Redis windows hold exactly what the
upstream produced, settled to the real counts."""

from __future__ import annotations

import json

import pytest
from processes import RedisServer, key_id
from spend_support import MESSAGES, burst, wait_until

from tests.support.scripted_upstream import ScriptedUpstream, ok

KEY = "sk-reliability-rate"
RPM = 40
TPM = 3000
WINDOW_S = 60
BODY = {"model": "large", "max_tokens": 100}
# The most one request may be counted at admission: one prompt token per byte of its body (the
# SDK's JSON is compact, so json.dumps with spaces is larger) plus its completion cap.
WORST_TOKENS = len(json.dumps({"messages": MESSAGES, **BODY})) + BODY["max_tokens"]


def windows(redis_server: RedisServer) -> dict[str, dict[str, int]]:
    """Every rate window of the key in Redis: {name: {"r": requests, "t": tokens}}."""
    with redis_server.client() as client:
        pattern = f"cascade:rate:{key_id(KEY)}:*"
        return {
            name.decode(): {k.decode(): int(v) for k, v in client.hgetall(name).items()}
            for name in client.scan_iter(match=pattern)
        }


@pytest.fixture
def replicas(start_replicas, redis_server: RedisServer, request: pytest.FixtureRequest) -> list:
    """Two replicas, one Redis, the key with the test's rate limits (its indirect parameter) and a USD
    limit that never binds; Redis calls get 1 s, as in the other spend tests (a saturated test
    machine must not send a replica to its outage rule)."""
    return start_replicas(
        2,
        redis=redis_server,
        env={"CASCADE_API_KEYS": KEY},
        budgets={"limit_usd": 1000.0, "rate_limits": request.param},
        redis_timeout_s=1.0,
    )


@pytest.mark.parametrize("replicas", [[{"window_s": WINDOW_S, "requests": RPM}]], indirect=True)
def test_a_burst_of_200_over_two_replicas_never_passes_the_request_limit(
    replicas, upstream: ScriptedUpstream, redis_server: RedisServer
) -> None:
    upstream.set_default("up-large", ok(usage=(5, 5)))
    statuses = burst(replicas, KEY, 200, **BODY)
    served = statuses.count(200)
    assert statuses.count(429) == 200 - served
    assert wait_until(lambda: sum(w.get("t", 0) for w in windows(redis_server).values()) == 10 * served)
    counted = windows(redis_server)
    assert counted and all(w["r"] <= RPM for w in counted.values()), counted
    assert served == sum(w["r"] for w in counted.values())
    # The burst filled each minute window it touched (it may straddle two).
    assert served == RPM * len(counted), (served, counted)
    assert len(upstream.calls("up-large")) == served
    refused = sum(r.sample("cascade_rate_limit_rejections_total", limit="requests") for r in replicas)
    assert refused == 200 - served


# Two limits of one window length share its counter (merged: RPM requests, TPM tokens).
@pytest.mark.parametrize(
    "replicas",
    [[{"window_s": WINDOW_S, "requests": RPM}, {"window_s": WINDOW_S, "tokens": TPM}]],
    indirect=True,
)
def test_a_burst_of_200_over_two_replicas_passes_the_token_limit_by_at_most_one_request(
    replicas, upstream: ScriptedUpstream, redis_server: RedisServer
) -> None:
    upstream.set_default("up-large", ok(usage=(30, 90)))  # 120 real tokens of a worst case of ~190
    statuses = burst(replicas, KEY, 200, **BODY)
    served = statuses.count(200)
    assert served >= 1 and statuses.count(429) == 200 - served
    # Settled: every window holds the real tokens of the requests it admitted, nothing reserved.
    assert wait_until(lambda: sum(w.get("t", 0) for w in windows(redis_server).values()) == 120 * served)
    for name, counts in windows(redis_server).items():
        assert counts["t"] <= TPM + WORST_TOKENS, (name, counts, WORST_TOKENS)
        assert counts["r"] <= RPM
    true_tokens = sum(p.prompt_tokens + p.completion_tokens for p in upstream.produced)
    assert true_tokens == 120 * served
    refused = sum(r.sample("cascade_rate_limit_rejections_total", limit="tokens") for r in replicas)
    assert refused + sum(
        r.sample("cascade_rate_limit_rejections_total", limit="requests") for r in replicas
    ) == (200 - served)
