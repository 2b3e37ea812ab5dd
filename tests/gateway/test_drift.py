"""Score drift: the sliding window of gateway.config.drift, and the PSI metric in a real scrape.

The end-to-end tests calibrate the small model's score bins on scripted answers of known
confidences, send live traffic through the gateway with the official openai SDK, and read
``cascade_score_drift_psi`` from /metrics with prometheus_client's parser.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import cycle, islice
from typing import Any

import numpy as np
import pytest

from gateway.config.drift import ROUTER_DRIFT_MODEL, DriftConfig, ScoreDriftMonitor
from policies import build_policy
from policies.score_distribution import bin_counts, decile_edges, population_stability_index
from policies.scorers import score_response
from tests.support.gateway_testkit import POLICY_DOCUMENT
from tests.support.routed_policy import EASY, ROUTED, router_section
from tests.support.scripted_upstream import ok

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
# The alert threshold of deploy/prometheus/rules/cascade.rules.yml (CascadeScoreDrift).
ALERT_PSI = 0.25
# Confidences of the small model's answers on the "calibration" traffic: spread over its range,
# so its scores fill ten decile bins.
CALIBRATION_CONFIDENCES = [0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95]


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _policy(score_distribution: dict[str, Any] | None) -> Any:
    document = dict(POLICY_DOCUMENT)
    if score_distribution is not None:
        document["score_distribution"] = score_distribution
    return build_policy(document)


def _uniform_distribution() -> dict[str, Any]:
    edges = [0.2, 0.4, 0.6, 0.8]
    return {
        "calibration_rows": 100,
        "models": {"small": {"edges": edges, "proportions": [0.2] * 5}},
        "tiers": {"balanced": {"small": [0.2] * 5}, "chain": {"small": [0.2] * 5}},
    }


def _samples(monitor: ScoreDriftMonitor) -> dict[tuple[str, str, str], float]:
    return {
        (sample.name, sample.labels["tier"], sample.labels["model"]): sample.value
        for family in monitor.collect()
        for sample in family.samples
    }


# --- the window (unit) --------------------------------------------------------------------------


def test_counts_slide_out_of_the_window_bucket_by_bucket() -> None:
    clock = FakeClock()
    monitor = ScoreDriftMonitor(DriftConfig(window_s=60, buckets=6, min_samples=1), clock=clock)
    policy = _policy(_uniform_distribution())
    monitor.reset(policy)
    monitor.observe(policy.policy_id, "balanced", "small", 0.1)  # bin 0 at t=1000
    clock.now += 30
    monitor.observe(policy.policy_id, "balanced", "small", 0.9)  # bin 4 at t=1030
    assert monitor.window_counts("balanced", "small") == [1, 0, 0, 0, 1]
    clock.now += 35  # t=1065: the bucket of t=1000 has left the 60 s window, t=1030's has not
    assert monitor.window_counts("balanced", "small") == [0, 0, 0, 0, 1]
    clock.now += 60
    assert monitor.window_counts("balanced", "small") == [0] * 5
    # A reused bucket starts from zero rather than adding to a stale slot's counts.
    monitor.observe(policy.policy_id, "balanced", "small", 0.5)
    assert monitor.window_counts("balanced", "small") == [0, 0, 1, 0, 0]


def test_psi_is_nan_below_min_samples_then_the_psi_of_the_window() -> None:
    clock = FakeClock()
    monitor = ScoreDriftMonitor(DriftConfig(window_s=60, buckets=6, min_samples=10), clock=clock)
    policy = _policy(_uniform_distribution())
    monitor.reset(policy)
    for score in [0.1] * 9:
        monitor.observe(policy.policy_id, "balanced", "small", score)
    values = _samples(monitor)
    assert math.isnan(values[("cascade_score_drift_psi", "balanced", "small")])
    assert values[("cascade_score_drift_samples", "balanced", "small")] == 9
    monitor.observe(policy.policy_id, "balanced", "small", 0.1)
    values = _samples(monitor)
    # Ten scores all in bin 0 of five equal bins: (1 - 0.2) ln 5 + 4 (1e-4 - 0.2) ln(1e-4 / 0.2).
    by_hand = 0.8 * math.log(5) + 4 * (1e-4 - 0.2) * math.log(1e-4 / 0.2)
    assert values[("cascade_score_drift_psi", "balanced", "small")] == pytest.approx(by_hand)
    assert values[("cascade_score_drift_samples", "chain", "small")] == 0


def test_labels_come_only_from_the_policy_and_a_new_policy_resets_the_window() -> None:
    monitor = ScoreDriftMonitor(DriftConfig(min_samples=1), clock=FakeClock())
    policy = _policy(_uniform_distribution())
    monitor.reset(policy)
    monitor.observe(policy.policy_id, "balanced", "small", 0.3)
    monitor.observe(policy.policy_id, "budget", "small", 0.3)  # not a policy tier
    monitor.observe(policy.policy_id, "balanced", "large", 0.3)  # final stage: no bins
    monitor.observe("another-policy", "balanced", "small", 0.3)  # in flight across a swap
    monitor.observe(policy.policy_id, "balanced", "small", math.nan)
    assert {(t, m) for _, t, m in _samples(monitor)} == {("balanced", "small"), ("chain", "small")}
    assert monitor.window_counts("balanced", "small") == [0, 1, 0, 0, 0]
    monitor.reset(policy)  # the same policy reloaded keeps its window
    assert monitor.window_counts("balanced", "small") == [0, 1, 0, 0, 0]
    swapped = _policy({**_uniform_distribution(), "calibration_rows": 101})
    monitor.reset(swapped)
    assert monitor.window_counts("balanced", "small") == [0] * 5
    monitor.reset(_policy(None))
    assert _samples(monitor) == {}


# --- end to end: openai SDK -> gateway -> scripted upstream, scraped and parsed -------------------


def _score_of(upstream: Any, confidence: float) -> float:
    """The score the gateway computes for a scripted answer of this confidence (top_k of the policy)."""
    import httpx

    upstream.script("up-small", ok(confidence=confidence))
    body = httpx.post(
        upstream.base_url + "/chat/completions",
        json={"model": "up-small", "messages": MESSAGES, "logprobs": True, "top_logprobs": 5},
        timeout=5,
    ).json()
    score = score_response(body, "mean_token_negentropy", 5)
    assert score is not None
    return score


@pytest.fixture
def calibrated_policy(upstream: Any, write_policy: Any) -> Any:
    """The test policy with bins of the small model's scores on CALIBRATION_CONFIDENCES x 20."""
    scores = np.array([_score_of(upstream, c) for c in CALIBRATION_CONFIDENCES] * 20)
    edges = decile_edges(scores)
    shares = list(bin_counts(edges, scores) / scores.size)
    upstream.reset()
    return write_policy(
        score_distribution={
            "calibration_rows": int(scores.size),
            "models": {"small": {"edges": edges, "proportions": shares}},
            "tiers": {"balanced": {"small": shares}},
        }
    )


def _send(gateway: Any, upstream: Any, confidences: list[float]) -> None:
    upstream.script("up-small", *(ok(confidence=c) for c in confidences))
    client = gateway.client()
    for _ in confidences:
        client.chat.completions.create(model="cascade/balanced", messages=MESSAGES)


def _drift(gateway: Any) -> tuple[float, float]:
    families = gateway.metrics()
    assert families["cascade_score_drift_psi"].type == "gauge"
    psi = [
        s.value
        for s in families["cascade_score_drift_psi"].samples
        if s.labels == {"tier": "balanced", "model": "small", "kind": "text"}
    ]
    count = [
        s.value
        for s in families["cascade_score_drift_samples"].samples
        if s.labels == {"tier": "balanced", "model": "small", "kind": "text"}
    ]
    assert len(psi) == len(count) == 1
    return psi[0], count[0]


def test_live_scores_like_the_calibrations_keep_psi_low(
    start_gateway, make_settings, upstream, calibrated_policy
) -> None:
    gateway = start_gateway(make_settings(policy=calibrated_policy, drift={"min_samples": 50}))
    _send(gateway, upstream, list(islice(cycle(CALIBRATION_CONFIDENCES), 40)))
    psi, count = _drift(gateway)
    assert count == 40 and math.isnan(psi)  # not reported below min_samples
    # Then a random sample of the calibration's distribution (fixed seed): sampling noise only.
    rng = np.random.default_rng(11)
    _send(gateway, upstream, [float(c) for c in rng.choice(CALIBRATION_CONFIDENCES, 110)])
    psi, count = _drift(gateway)
    assert count == 150
    # Under no drift PSI is of the order of (bins - 1) / n = 9 / 150 = 0.06 (measured: 0.020).
    assert 0 < psi < 0.15 < ALERT_PSI


def test_live_scores_shifted_from_the_calibrations_raise_psi_above_the_alert(
    start_gateway, make_settings, upstream, calibrated_policy
) -> None:
    gateway = start_gateway(make_settings(policy=calibrated_policy, drift={"min_samples": 50}))
    # The cheap model turned more confident: only the top three calibration confidences.
    _send(gateway, upstream, list(islice(cycle([0.85, 0.9, 0.95]), 60)))
    psi, count = _drift(gateway)
    assert count == 60
    assert psi > ALERT_PSI
    # Other tiers have no bins in this policy: no series for them.
    tiers = {s.labels["tier"] for s in gateway.metrics()["cascade_score_drift_psi"].samples}
    assert tiers == {"balanced"}


def test_a_policy_swap_starts_an_empty_window(
    start_gateway, make_settings, upstream, calibrated_policy, monkeypatch
) -> None:
    import json

    from policies import save_policy

    monkeypatch.setenv("CASCADE_ADMIN_KEY", "sk-admin")
    admin = {"Authorization": "Bearer sk-admin"}
    gateway = start_gateway(make_settings(policy=calibrated_policy, drift={"min_samples": 50}))
    _send(gateway, upstream, list(islice(cycle([0.85, 0.9, 0.95]), 60)))
    assert _drift(gateway)[1] == 60
    # Reloading the same policy keeps the window.
    first_id = gateway.gateway.policy.policy_id
    assert gateway.http.post("/admin/reload", headers=admin).json()["policy_id"] == first_id
    assert _drift(gateway)[1] == 60
    document = json.loads(calibrated_policy.read_text())
    document["tiers"]["balanced"]["routes"][0]["thresholds"] = [0.6]
    document.pop("policy_id")
    save_policy(build_policy(document), calibrated_policy)
    reloaded = gateway.http.post("/admin/reload", headers=admin).json()["policy_id"]
    assert reloaded != first_id
    psi, count = _drift(gateway)
    assert count == 0 and math.isnan(psi)


def test_a_kind_sections_scores_have_windows_of_their_own() -> None:
    monitor = ScoreDriftMonitor(DriftConfig(min_samples=1), clock=FakeClock())
    document = dict(POLICY_DOCUMENT, score_distribution=_uniform_distribution())
    document["kinds"] = {
        "tool_call": {
            "models": document["models"],
            "default_tier": document["default_tier"],
            "tiers": document["tiers"],
            "score_distribution": {
                "calibration_rows": 10,
                "models": {"small": {"edges": [0.5], "proportions": [0.5, 0.5]}},
                "tiers": {"balanced": {"small": [0.5, 0.5]}},
            },
        }
    }
    policy = build_policy(document)
    monitor.reset(policy)
    monitor.observe(policy.policy_id, "balanced", "small", 0.9, "tool_call")
    monitor.observe(policy.policy_id, "balanced", "small", 0.1)  # a text request
    monitor.observe(policy.policy_id, "chain", "small", 0.1, "tool_call")  # no bins in the section
    assert monitor.window_counts("balanced", "small", "tool_call") == [0, 1]
    assert monitor.window_counts("balanced", "small") == [1, 0, 0, 0, 0]
    assert monitor.window_counts("chain", "small", "tool_call") is None
    labels = {
        (s.labels["tier"], s.labels["model"], s.labels["kind"])
        for family in monitor.collect()
        for s in family.samples
    }
    assert labels == {
        ("balanced", "small", "text"),
        ("chain", "small", "text"),
        ("balanced", "small", "tool_call"),
    }


def test_a_routed_tier_tracks_its_router_probability_in_place_of_a_score(
    start_gateway: Callable, make_settings: Callable, write_policy: Callable, upstream: Any
) -> None:
    # Calibration saw the router's probability spread evenly across 0.5; live traffic is all easy
    # prompts (p_small = 0.881), so the window holds the upper bin only.
    bins = {"edges": [0.5], "proportions": [0.5, 0.5]}
    policy = write_policy(
        tier_changes={"balanced": {"routing": {**ROUTED, "probability": bins}}}, router=router_section()
    )
    running = start_gateway(make_settings(policy=policy, drift={"min_samples": 4}))
    upstream.set_default("up-small", ok("4", confidence=0.99))
    client = running.client()
    for _ in range(3):
        client.chat.completions.create(model="cascade/balanced", messages=EASY)
    labels = {"tier": "balanced", "model": ROUTER_DRIFT_MODEL, "kind": "text"}
    assert running.sample("cascade_score_drift_samples", **labels) == 3.0
    assert math.isnan(running.sample("cascade_score_drift_psi", **labels))  # below min_samples
    client.chat.completions.create(model="cascade/balanced", messages=EASY)
    assert running.sample("cascade_score_drift_psi", **labels) == pytest.approx(
        population_stability_index([0, 4], [0.5, 0.5])
    )
