"""docs/operations.md#shift-alarm: a tier whose traffic no longer looks like its calibration sets off its
shift alarm, is served its declared safe route until an operator clears the alarm, and replicas share
the alarm and the clear through Redis (real Redis, scripted upstream)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.config.shift_alarm import ShiftAlarmConfig, ShiftAlarms
from gateway.routing.safe_routes import SafeRoutes
from gateway.routing.tier_choice import RoutePlan
from policies import build_policy
from tests.support.gateway_testkit import ADMIN_KEY, until
from tests.support.policy_files import policy_document, write_policy
from tests.support.scripted_upstream import ok
from tests.support.shared_redis import REDIS_URL

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
GAUGE = "cascade_shift_alarm"
# The calibration of tier ``balanced``: half its cheap scores under 0.5, half of it escalated.
REFERENCE = {
    "calibration_rows": 200,
    "tiers": {
        "balanced": {
            "model": "small",
            "score": {"edges": [0.5], "counts": [100, 100]},
            "escalation": [100, 100],
        }
    },
}
# A window of 20 requests tested every 10; what the tier does when alarmed.
ALARM = {"window": 20, "blocks": 2, "alpha": 1e-3, "tiers": {"balanced": {"action": "safe_route"}}}


def _create(gateway: Any) -> Any:
    return gateway.client().chat.completions.with_raw_response.create(model="cascade", messages=MESSAGES)


def _served_by(gateway: Any) -> str:
    return _create(gateway).headers["x-cascade-models-called"]


def test_an_alarm_switches_the_tier_to_its_safe_route_on_both_replicas_until_cleared(
    keys, start_gateway, make_settings, upstream, tmp_path: Path
) -> None:
    policy = write_policy(tmp_path / "policy.json", shift_reference=REFERENCE)
    settings = make_settings(policy=policy, redis_url=REDIS_URL, shift_alarm=ALARM)
    first, second = start_gateway(settings), start_gateway(settings)
    upstream.set_default("up-small", ok(confidence=0.99))  # confident: every score in the top bin
    upstream.set_default("up-large", ok(confidence=0.99))
    for _ in range(19):
        assert _served_by(first) == "small"
    assert first.sample(GAUGE, tier="balanced") == 0  # not a full window yet
    assert _served_by(first) == "small"  # the 20th request fills the window: the alarm is set
    assert first.sample(GAUGE, tier="balanced") == 1
    assert _served_by(first) == "large"  # the safe route: the strong model alone
    # The other replica adopts the alarm at its once-a-second Redis refresh.
    assert until(lambda: second.sample(GAUGE, tier="balanced") == 1, 10)
    assert _served_by(second) == "large"
    cleared = second.http.post("/admin/shift-alarms/clear", params={"tier": "balanced"}, headers=ADMIN)
    assert cleared.status_code == 200 and cleared.json() == {
        "tier": "balanced",
        "cleared": True,
        "shared": True,
    }
    assert _served_by(second) == "small"
    assert until(lambda: first.sample(GAUGE, tier="balanced") == 0, 10)
    assert _served_by(first) == "small"
    status = first.http.get("/admin/shift-alarms", headers=ADMIN).json()
    assert status["tiers"]["balanced"]["alarmed"] is False


def test_a_policy_without_references_loads_with_no_alarm_and_notify_keeps_the_route(
    start_gateway, make_settings, upstream, tmp_path: Path
) -> None:
    gateway = start_gateway(make_settings(shift_alarm=ALARM))  # the test policy: no shift_reference
    assert gateway.http.get("/admin/shift-alarms", headers=ADMIN).json()["tiers"] == {}
    refused = gateway.http.post("/admin/shift-alarms/clear", params={"tier": "balanced"}, headers=ADMIN)
    assert refused.status_code == 400
    policy = write_policy(tmp_path / "policy.json", shift_reference=REFERENCE)
    notify = {**ALARM, "tiers": {"balanced": {"action": "notify"}}}
    gateway = start_gateway(make_settings(policy=policy, shift_alarm=notify))
    upstream.set_default("up-small", ok(confidence=0.99))
    assert all(_served_by(gateway) == "small" for _ in range(21))
    assert gateway.sample(GAUGE, tier="balanced") == 1  # alarmed, and still served its cascade


def test_the_buffered_safe_route_turns_the_prefix_rule_off_and_keeps_the_cascade() -> None:
    document = policy_document(
        {"balanced": {"commit": {"rule": "prefix", "tokens": 8}}}, shift_reference=REFERENCE
    )
    policy = build_policy(document)
    config = ShiftAlarmConfig(tiers={"balanced": {"action": "safe_route", "safe_route": "buffered"}})
    alarms = ShiftAlarms(config)
    alarms.reset(policy)
    alarms.alarmed.add("balanced")
    route = policy.tiers["balanced"].routes[0]
    safe = SafeRoutes(alarms).plan(RoutePlan("balanced", policy, route))
    assert safe.route == route and safe.policy is not None and safe.policy.policy_id == policy.policy_id
    assert safe.policy.tiers["balanced"].commit is None and policy.tiers["balanced"].commit is not None


def test_a_new_policy_clears_the_alarms_and_reloading_the_same_one_keeps_them() -> None:
    policy = build_policy(policy_document(shift_reference=REFERENCE))
    recalibrated = build_policy(
        policy_document({"balanced": {"routes": _routes(0.6)}}, shift_reference=REFERENCE)
    )
    assert recalibrated.policy_id != policy.policy_id
    alarms = ShiftAlarms(ShiftAlarmConfig(**ALARM))
    alarms.reset(policy)
    for _ in range(20):  # every score in the top bin, none escalated: a window unlike the reference
        alarms.observe(policy.policy_id, "balanced", "text", "accepted", "small", 0.96, False)
    assert alarms.alarmed == {"balanced"}
    alarms.reset(policy)  # the same policy reloaded
    assert alarms.alarmed == {"balanced"}
    alarms.reset(recalibrated)
    assert alarms.alarmed == set() and alarms.status()["balanced"]["last_p_values"] == []


def _routes(threshold: float) -> list[dict[str, Any]]:
    return [{"weight": 1.0, "models": ["small", "large"], "thresholds": [threshold]}]


def test_a_window_the_blocks_do_not_divide_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="multiple of blocks"):
        ShiftAlarmConfig(window=50, blocks=4)
