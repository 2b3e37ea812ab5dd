"""docs/contracts.md#faults: a model's circuit breaker opens after failed calls, is skipped while
open (a cascade escalates with reason ``circuit_open``; no stage left: 503 with Retry-After),
lets one probe through after its open period, closes on its success, and is shared by replicas
through Redis. The open period is timed by a clock the tests move, never by sleeping."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from gateway.config.fail_over import BreakerPolicy
from gateway.telemetry.metrics import GatewayMetrics
from gateway.upstream.breaker import Breakers, CircuitState
from tests.support.gateway_testkit import model_configs, until
from tests.support.scripted_upstream import error, ok
from tests.support.shared_redis import REDIS_URL

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


class Clock:
    """Unix seconds that move only when told."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _breaker(clock: Clock, **policy: Any) -> Any:
    breakers = Breakers({"small": BreakerPolicy(**policy)}, GatewayMetrics(), clock)
    return breakers.by_model["small"]


def test_opens_after_consecutive_failures_and_one_probe_closes_it() -> None:
    clock = Clock()
    breaker = _breaker(clock, failures=3, failure_rate=None, open_s=30)
    assert [breaker.failed() for _ in range(3)] == [False, False, True]
    assert breaker.state is CircuitState.OPEN and not breaker.admit()
    clock.now += 30
    assert breaker.admit() and breaker.state is CircuitState.HALF_OPEN
    assert not breaker.admit()  # one probe at a time
    breaker.succeeded()
    assert breaker.state is CircuitState.CLOSED and breaker.admit()


def test_a_failed_probe_opens_it_for_another_period() -> None:
    clock = Clock()
    breaker = _breaker(clock, failures=1, failure_rate=None, open_s=10)
    breaker.failed()
    clock.now += 10
    assert breaker.admit()
    assert breaker.failed()
    assert breaker.state is CircuitState.OPEN and breaker.open_until == clock.now + 10


def test_a_success_resets_the_count_and_a_failure_rate_over_the_window_opens_it() -> None:
    clock = Clock()
    breaker = _breaker(clock, failures=3, failure_rate=0.5, window_s=10, min_calls=4)
    for _ in range(2):
        breaker.succeeded()
        breaker.failed()  # never 3 in a row
    assert breaker.state is CircuitState.OPEN  # 2 of 4 calls failed within the window
    clock.now += 100
    fresh = _breaker(clock, failures=0, failure_rate=0.5, window_s=10, min_calls=4)
    fresh.failed()
    fresh.failed()
    clock.now += 20  # those failures left the window
    fresh.succeeded()
    fresh.succeeded()
    assert not fresh.failed() and fresh.state is CircuitState.CLOSED  # 1 of 3 calls, fewer than 4


def _settings(make_settings: Any, upstream: Any, **changes: Any) -> Any:
    models = model_configs(upstream.base_url)
    for config in models.values():
        config["breaker"] = {"failures": 2, "failure_rate": None, "open_s": 30}
    return make_settings(models=models, **changes)


def _create(gateway: Any, tier: str | None = None) -> Any:
    extra = {"extra_headers": {"x-cascade-tier": tier}} if tier else {}
    return gateway.client().chat.completions.with_raw_response.create(
        model="cascade", messages=MESSAGES, **extra
    )


def test_an_open_circuit_is_skipped_with_its_reason_then_probed_and_closed(
    start_gateway, make_settings, upstream
) -> None:
    gateway = start_gateway(_settings(make_settings, upstream))
    clock = Clock()
    gateway.gateway.breakers.set_clock(clock)
    upstream.set_default("up-small", error(503))
    for _ in range(2):
        assert _create(gateway).headers["x-cascade-escalation-reason"] == "upstream_error"
    assert gateway.sample("cascade_upstream_circuit_state", model="small") == 1
    calls = len(upstream.calls("up-small"))  # 2 calls of 3 attempts

    raw = _create(gateway)
    assert raw.headers["x-cascade-models-called"] == "large"
    assert raw.headers["x-cascade-escalation-reason"] == "circuit_open"
    assert len(upstream.calls("up-small")) == calls  # not called while open

    clock.now += 30
    upstream.set_default("up-small", ok(confidence=0.99))
    assert _create(gateway).headers["x-cascade-models-called"] == "small"  # the probe, answered
    assert gateway.sample("cascade_upstream_circuit_state", model="small") == 0


def test_a_one_stage_tier_whose_circuit_is_open_answers_503_with_retry_after(
    start_gateway, make_settings, upstream
) -> None:
    gateway = start_gateway(_settings(make_settings, upstream))
    gateway.gateway.breakers.set_clock(Clock())
    upstream.set_default("up-large", error(500))
    for _ in range(2):
        with pytest.raises(openai.APIStatusError) as info:
            _create(gateway, "direct")
        assert info.value.status_code == 502
    with pytest.raises(openai.APIStatusError) as info:
        _create(gateway, "direct")
    assert info.value.status_code == 503
    assert info.value.body["code"] == "upstream_circuit_open"
    assert info.value.response.headers["retry-after"] == "30"
    with pytest.raises(openai.APIStatusError) as info:  # streamed: the same 503 before the stream starts
        gateway.client().chat.completions.create(
            model="cascade", messages=MESSAGES, stream=True, extra_headers={"x-cascade-tier": "direct"}
        )
    assert info.value.status_code == 503 and info.value.body["code"] == "upstream_circuit_open"
    messages = gateway.anthropic_client().messages  # the Messages API's own error shape
    with pytest.raises(anthropic.APIStatusError) as refused:
        messages.create(
            model="cascade", max_tokens=16, messages=MESSAGES, extra_headers={"x-cascade-tier": "direct"}
        )
    assert refused.value.status_code == 503 and refused.value.body["type"] == "error"


def test_two_replicas_share_an_opening_through_redis(keys, start_gateway, make_settings, upstream) -> None:
    first, second = (start_gateway(_settings(make_settings, upstream, redis_url=REDIS_URL)) for _ in range(2))
    upstream.set_default("up-small", error(503))
    for _ in range(2):
        _create(first)
    assert first.sample("cascade_upstream_circuit_state", model="small") == 1
    # The second replica never failed a call: it adopts the opening at its once-a-second refresh.
    assert until(lambda: second.sample("cascade_upstream_circuit_state", model="small") == 1, 10)
    calls = len(upstream.calls("up-small"))
    assert _create(second).headers["x-cascade-escalation-reason"] == "circuit_open"
    assert len(upstream.calls("up-small")) == calls


def test_failures_on_two_replicas_count_together(keys, start_gateway, make_settings, upstream) -> None:
    first, second = (start_gateway(_settings(make_settings, upstream, redis_url=REDIS_URL)) for _ in range(2))
    upstream.set_default("up-small", error(503))
    _create(first)
    _create(second)  # the second failed call of the two replicas together: it opens
    assert second.sample("cascade_upstream_circuit_state", model="small") == 1


def test_a_success_on_either_replica_resets_the_shared_count(
    keys, start_gateway, make_settings, upstream
) -> None:
    first, second = (start_gateway(_settings(make_settings, upstream, redis_url=REDIS_URL)) for _ in range(2))
    upstream.script("up-small", error(503), error(503), error(503))  # one failed call: 3 attempts
    _create(first)
    shared = second.gateway.breakers.by_model["small"]
    assert until(lambda: shared.consecutive == 1, 10)  # read at the second's refresh
    assert _create(second).headers["x-cascade-models-called"] == "small"  # answered: the count resets
    upstream.set_default("up-small", error(503))
    _create(first)  # one failure since the reset: below the 2 that open it
    assert first.sample("cascade_upstream_circuit_state", model="small") == 0
