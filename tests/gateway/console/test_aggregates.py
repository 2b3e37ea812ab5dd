"""The console's deployment-wide aggregates against the real Redis: two replicas' snapshots summed,
the keys' spend samples taken once a minute by one replica, the breaker and recalibration reads.

Traffic goes through the real app (in-process, the scripted upstream); each replica's feed is
flushed directly (what its 1 s loop does every ``interval_s``), so nothing waits for time.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from calibration.recalibration.redis_io import keep_report
from gateway.assembly.replica_feed import ReplicaFeed
from gateway.commands.keys import add_key
from gateway.console.aggregates.deployment import Deployment, quantile, read_deployment, sum_snapshots
from gateway.console.aggregates.keys import keys_view
from gateway.console.aggregates.policy import last_recalibration, policy_view
from gateway.console.aggregates.tiers import BOUNDS_MIN_SERVED, INSIDE, OUTSIDE, TOO_FEW, tiers_view
from gateway.console.aggregates.upstreams import upstreams_view
from policies import build_policy
from tests.support.gateway_testkit import POLICY_DOCUMENT
from tests.support.policy_files import bounds_expectation, policy_document
from tests.support.scripted_upstream import error, ok

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def ask(replica: Any, api_key: str = "none", tier: str = "cascade") -> None:
    replica.client(api_key=api_key).chat.completions.create(model=tier, messages=MESSAGES)


def deployment_of(replica: Any) -> Deployment:
    """Flush ``replica``'s snapshot and read every live replica's, summed (on its own loop)."""
    gateway = replica.gateway

    async def read() -> Deployment:
        assert gateway.feed is not None
        await gateway.feed.flush()
        return await read_deployment(gateway.shared.redis, gateway.shared.keys)

    return replica.app_loop.call(read())


def test_two_replicas_counts_are_summed_into_each_tiers_live_measures(
    keys, console_settings, start_gateway, upstream
) -> None:
    replicas = [start_gateway(console_settings()) for _ in range(2)]
    upstream.script(
        "up-small", ok("Paris.", confidence=0.9), ok("Paris.", confidence=0.9), ok("Hm.", confidence=0.1)
    )
    upstream.set_default("up-large", ok("Paris is the capital.", confidence=0.9))
    ask(replicas[0])
    ask(replicas[0])
    ask(replicas[1])  # escalated: small's 0.1 is under the 0.5 threshold
    deployment_of(replicas[0])
    deployment = deployment_of(replicas[1])

    assert deployment.replicas == 2
    view = tiers_view(deployment, replicas[0].gateway.policy, None)
    balanced = next(t for t in view.tiers if t.name == "balanced")
    assert balanced.served == 3
    assert balanced.live.escalation_rate == pytest.approx(1 / 3)
    both = [r.metrics()["cascade_cost_usd"] for r in replicas]
    spent = sum(s.value for family in both for s in family.samples if s.name == "cascade_cost_usd_total")
    assert balanced.live.cost_usd == pytest.approx(spent / 3)
    assert balanced.promised_source == "in sample" and balanced.promised.escalation_rate == 0.4
    assert balanced.live.quality is None and balanced.quality_source == "no labels"
    assert balanced.mechanism == "cascade" and balanced.routes == ["small -> large @ 0.5"]
    (histogram,) = balanced.histograms
    assert histogram.model == "small" and histogram.threshold == 0.5
    assert sum(count for _, count in histogram.buckets) == 3
    assert [p["route"] for p in view.envelope] == ["small", "small -> large", "large"]
    direct = next(t for t in view.tiers if t.name == "direct")
    assert direct.served == 0 and direct.live.cost_usd is None and direct.histograms == []


def test_keys_spend_is_sampled_by_one_replica_a_minute_and_listed_without_secrets(
    keys, sync_redis, console_settings, start_gateway, upstream
) -> None:
    secret, used_id = add_key(
        sync_redis, "team-a", 5.0, keys, rate_limits=[{"window_s": 60, "requests": 100}]
    )
    _, idle_id = add_key(sync_redis, "team-b", 2.0, keys)
    settings = console_settings(auth={"open": False})
    replicas = [start_gateway(settings) for _ in range(2)]
    upstream.set_default("up-small", ok("Paris.", confidence=0.9))
    ask(replicas[0], secret)
    ask(replicas[0], secret)

    gateway = replicas[1].gateway
    view = replicas[1].app_loop.call(
        keys_view(
            gateway.shared.authenticator, gateway.shared.spend, gateway.shared.redis, keys, 3600, time.time()
        )
    )
    assert [row.key_id for row in view.keys] == [used_id, idle_id]  # most spent first
    used, idle = view.keys
    assert used.name == "team-a" and used.spent_usd > 0 and used.limit_usd == 5.0 and idle.spent_usd == 0
    assert used.rate_windows[0].requests_used == 2 and used.rate_windows[0].requests_limit == 100
    assert view.spend_series[used_id][-1] == pytest.approx(used.spent_usd)  # the page's own sample
    assert view.total == 2 and secret not in repr(view)

    # The minute sampler, on a minute of this window the replicas' own 1 s loops never sample (a past one).
    start = gateway.shared.spend.window_start()  # the keys' fixed window (no budget period)
    minute = start + (120 if int(time.time() // 60) * 60 == start + 60 else 60)
    feeds = [_feed(r.gateway, keys, minute) for r in replicas]
    first = replicas[0].app_loop.call(feeds[0].sample_key_spend())
    second = replicas[1].app_loop.call(feeds[1].sample_key_spend())
    assert (first, second) == (True, False)  # the minute is taken by the first
    sampled = sync_redis.hgetall(keys.console_key_spend(minute))
    assert sampled == {used_id: str(round(used.spent_usd * 1e9)), idle_id: "0"}


def _feed(gateway: Any, keys: Any, at: float) -> ReplicaFeed:
    """A feed of ``gateway``'s shared state whose clock stands at ``at``."""
    shared = gateway.shared
    return ReplicaFeed(
        gateway.metrics,
        shared.redis,
        keys,
        authenticator=shared.authenticator,
        spend=shared.spend,
        clock=lambda: at,
    )


def test_failures_by_kind_latency_and_the_shared_breaker_per_model(
    keys, console_settings, start_gateway, upstream
) -> None:
    replica = start_gateway(console_settings())
    upstream.script("up-small", error(500), error(500), error(500))
    upstream.set_default("up-large", ok("Paris.", confidence=0.9))
    ask(replica)
    deployment = deployment_of(replica)
    gateway = replica.gateway
    view = replica.app_loop.call(
        upstreams_view(deployment, gateway.models, gateway.shared.redis, gateway.shared.keys)
    )
    rows = {row.model: row for row in view.models}
    small = rows["small"]
    assert small.failures.get("5xx", 0) == small.attempts >= 1
    assert rows["large"].attempts == 1 and rows["large"].failures == {}
    assert rows["large"].latency_s[0.5] is not None
    assert set(small.breaker.states.values()) == {"closed"} and small.breaker.shared_failures == 1


def test_the_policy_page_reads_the_last_recalibration_and_the_replicas_policy(
    keys, sync_redis, console_settings, start_gateway
) -> None:
    replica = start_gateway(console_settings())
    policy = replica.gateway.policy
    report = {
        "created_at": "2026-12-06T06:00:00+00:00",
        "current_policy": {"policy_id": policy.policy_id},
        "new_policy": {"policy_id": "sha256:new"},
        "tiers": {
            "balanced": {
                "current": {"quality": {"mean": 0.66}},
                "new": {"quality": {"mean": 0.7}},
                "ok": True,
            }
        },
        "decision": {"accepted": True, "reason": None, "pushed": True, "version": 4},
    }
    keep_report(sync_redis, report, keys)
    gateway = replica.gateway
    stored = replica.app_loop.call(last_recalibration(gateway.shared.redis, keys))
    deployment = deployment_of(replica)
    view = policy_view(policy, gateway.shared.policy_store.status(), deployment, stored)
    assert view.policy_id == policy.policy_id and view.loaded_at is not None
    assert view.replicas_serving == {policy.policy_id: 1}
    assert [t.name for t in view.tiers] == list(POLICY_DOCUMENT["tiers"])
    recal = view.recalibration
    assert recal is not None and recal.pushed and recal.version == 4 and recal.new_policy_id == "sha256:new"
    assert recal.tiers[0].current["quality"] == 0.66
    tiers = tiers_view(deployment, policy, stored)
    balanced = next(t for t in tiers.tiers if t.name == "balanced")
    assert balanced.live.quality == 0.66 and "recalibration" in balanced.quality_source
    assert view.learning is None  # no replica samples traffic


def test_quantiles_interpolate_inside_the_bucket_like_histogram_quantile() -> None:
    buckets = [(0.1, 0.0), (0.5, 10.0), (1.0, 20.0), (float("inf"), 20.0)]
    assert quantile(buckets, 0.5) == pytest.approx(0.5)
    assert quantile(buckets, 0.25) == pytest.approx(0.3)
    assert quantile(buckets, 0.75) == pytest.approx(0.75)
    assert quantile([(1.0, 0.0), (float("inf"), 0.0)], 0.5) is None
    assert quantile([(1.0, 1.0), (float("inf"), 4.0)], 0.9) == 1.0  # past the last finite bound


def test_drift_windows_of_the_replicas_add_up_per_bin() -> None:
    one = {"samples": [], "drift": [["text", "t", "m", [0.5], [0.5, 0.5], [3, 1]]]}
    two = {"samples": [], "drift": [["text", "t", "m", [0.5], [0.5, 0.5], [2, 4]]]}
    assert sum_snapshots([one, two]).drift[("text", "t", "m")].counts == [5, 5]


def _served(tier: str, accepted: float, escalated: float, cost_usd: float) -> list[list[Any]]:
    """One replica's snapshot samples for ``tier``: served requests by outcome and the cost."""
    return [
        ["cascade_requests_total", {"tier": tier, "outcome": "accepted"}, accepted],
        ["cascade_requests_total", {"tier": tier, "outcome": "escalated"}, escalated],
        ["cascade_requests_total", {"tier": tier, "outcome": "rejected"}, 50.0],  # not served
        ["cascade_cost_usd_total", {"tier": tier}, cost_usd],
    ]


def test_each_tiers_bounds_are_shown_with_the_live_point_figures_judged_inside_or_outside() -> None:
    document = policy_document(
        {
            name: {"expected": {**POLICY_DOCUMENT["tiers"][name]["expected"], "bounds": bounds}}
            for name, bounds in (
                ("balanced", bounds_expectation(0.66, 0.0005, (0.3, 0.5), confidence=0.9)),
                ("chain", bounds_expectation(0.68, 0.0009, (0.4, 0.6))),
            )
        }
    )
    policy = build_policy(document)
    one = {"samples": _served("balanced", 12, 8, 0.006) + _served("chain", 1, 1, 0.001), "drift": []}
    two = {"samples": _served("balanced", 12, 8, 0.006) + _served("chain", 1, 1, 0.001), "drift": []}
    view = tiers_view(sum_snapshots([one, two]), policy, None)
    tiers = {t.name: t for t in view.tiers}

    balanced = tiers["balanced"].bounds
    assert tiers["balanced"].served == 40 >= BOUNDS_MIN_SERVED
    assert balanced is not None and balanced.confidence == 0.9 and balanced.quality_min == 0.66
    assert balanced.cost_max == 0.0005 and balanced.escalation == (0.3, 0.5)
    live = tiers["balanced"].live
    assert live.cost_usd == pytest.approx(0.0003) and balanced.cost == INSIDE
    assert live.escalation_rate == pytest.approx(0.4) and balanced.escalation_verdict == INSIDE
    # One replica escalating most of its requests at a higher cost: both live figures beyond their bounds.
    one["samples"] = _served("balanced", 2, 30, 0.03)
    outside = tiers_view(sum_snapshots([one, two]), policy, None).tiers[0]
    assert outside.live.escalation_rate == pytest.approx(38 / 52)
    assert outside.live.cost_usd == pytest.approx(0.036 / 52)
    assert outside.bounds is not None and outside.bounds.cost == OUTSIDE == outside.bounds.escalation_verdict

    chain = tiers["chain"].bounds  # 4 served requests: no verdict on a point value that noisy
    assert chain is not None and chain.confidence == 0.95
    assert chain.cost == TOO_FEW and chain.escalation_verdict == TOO_FEW
    assert tiers["direct"].bounds is None  # calibrated without bounds
