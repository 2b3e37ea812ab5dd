"""docs/contracts.md#faults: a model's retry policy: full-jitter backoff, an upstream's asked wait
honoured up to its cap, the retry deadline, and a reset before any answer byte retried (charged its
worst case, reserved for every attempt) where the model allows it."""

from __future__ import annotations

import email.utils
import time
from typing import Any

import openai
import orjson
import pytest

from gateway.api.app import build_gateway
from gateway.config.fail_over import RetryPolicy
from gateway.config.settings import Settings
from gateway.routing.tier_choice import RoutePlan
from gateway.upstream.failure import asked_wait
from gateway.upstream.retry import backoff_delay, retry_delay
from gateway.wire.requests import parse_request
from tests.support.gateway_testkit import model_configs
from tests.support.scripted_upstream import Reply, error, ok

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
POLICY = RetryPolicy(base_s=0.5, cap_s=8.0, retry_after_cap_s=10.0, deadline_s=20.0)


class Draws:
    """A uniform source that records each range it is asked for and answers its upper end."""

    def __init__(self) -> None:
        self.ranges: list[tuple[float, float]] = []

    def __call__(self, low: float, high: float) -> float:
        self.ranges.append((low, high))
        return high


def test_backoff_is_drawn_from_zero_to_the_capped_exponential() -> None:
    draws = Draws()
    delays = [backoff_delay(POLICY, retry, draws) for retry in range(6)]
    assert draws.ranges == [(0.0, 0.5), (0.0, 1.0), (0.0, 2.0), (0.0, 4.0), (0.0, 8.0), (0.0, 8.0)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]


def test_an_asked_wait_replaces_the_draw_up_to_its_cap_and_fails_over_beyond_it() -> None:
    draws = Draws()
    asked = retry_delay(POLICY, 2, 0, 3.0, 0.0, 100.0, now=0.0, uniform=draws)
    assert asked == 3.0 and not draws.ranges
    assert retry_delay(POLICY, 2, 0, 10.5, 0.0, 100.0, now=0.0, uniform=draws) is None


def test_no_retry_past_the_retries_the_request_deadline_or_the_retry_deadline() -> None:
    assert retry_delay(POLICY, 0, 2, None, 0.0, 100.0, now=0.0, uniform=Draws()) is None
    assert retry_delay(POLICY, 1, 0, 2.0, 0.0, 1.5, now=0.0) is None  # past the request's deadline
    assert retry_delay(POLICY, 1, 0, 2.0, 0.0, 100.0, now=18.5) is None  # past first + deadline_s
    assert retry_delay(POLICY, 1, 0, 2.0, 0.0, 100.0, now=17.5) == 2.0


def test_retry_after_ms_wins_over_retry_after_and_an_http_date_is_read() -> None:
    assert asked_wait({"retry-after-ms": "250", "retry-after": "7"}) == 0.25
    assert asked_wait({"retry-after-ms": "soon", "retry-after": "7"}) == 7.0
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    wait = asked_wait({"retry-after": date})
    assert wait is not None and 25 < wait <= 30
    assert asked_wait({}) is None


def _create(gateway: Any, tier: str | None = None) -> Any:
    extra = {"extra_headers": {"x-cascade-tier": tier}} if tier else {}
    return gateway.client().chat.completions.with_raw_response.create(
        model="cascade", messages=MESSAGES, **extra
    )


def test_a_429s_asked_wait_is_the_retry_delay_and_a_longer_one_fails_over_at_once(
    start_gateway, make_settings, upstream
) -> None:
    gateway = start_gateway()
    draws = Draws()
    gateway.gateway.pool["small"].uniform = draws
    upstream.script("up-small", Reply(status=429, headers={"retry-after-ms": "1"}), ok(confidence=0.99))
    assert _create(gateway).headers["x-cascade-models-called"] == "small"
    assert len(upstream.calls("up-small")) == 2 and not draws.ranges  # waited as asked, no draw

    upstream.reset()
    upstream.script("up-small", error(429, retry_after=60))  # past retry_after_cap_s (10 s)
    raw = _create(gateway)
    assert raw.headers["x-cascade-models-called"] == "small,large"
    assert len(upstream.calls("up-small")) == 1  # no retry: failed over to the next stage


def test_a_persistent_429_without_retry_after_backs_off_by_full_jitter_draws(gateway, upstream) -> None:
    draws = Draws()
    gateway.gateway.pool["small"].uniform = draws
    upstream.set_default("up-small", error(429))
    assert _create(gateway).headers["x-cascade-models-called"] == "small,large"
    assert draws.ranges == [(0.0, 0.001), (0.0, 0.002)]  # the test models' 1 ms base, doubled


def _one_stage(upstream: Any, *, uncertain: bool) -> dict[str, Any]:
    models = model_configs(upstream.base_url)
    models["large"]["retry"] = {"base_s": 0.001, "uncertain": uncertain}
    return models


def test_a_reset_before_any_byte_is_retried_and_answered_where_reserved(
    start_gateway, make_settings, upstream
) -> None:
    gateway = start_gateway(make_settings(models=_one_stage(upstream, uncertain=True)))
    upstream.script("up-large", Reply(drop_connection=True), ok("Paris."))
    raw = _create(gateway, "direct")
    assert raw.parse().choices[0].message.content == "Paris."
    assert len(upstream.calls("up-large")) == 2
    # The one rule: the reset attempt at its worst case (per query: 0.001), the answer at its usage.
    assert float(raw.headers["x-cascade-cost-usd"]) == pytest.approx(0.002)


def test_a_reset_before_any_byte_is_not_retried_where_the_model_does_not_allow_it(
    start_gateway, make_settings, upstream
) -> None:
    gateway = start_gateway(make_settings(models=_one_stage(upstream, uncertain=False)))
    upstream.script("up-large", Reply(drop_connection=True), ok("Paris."))
    with pytest.raises(openai.APIStatusError) as info:
        _create(gateway, "direct")
    assert info.value.status_code == 502
    assert len(upstream.calls("up-large")) == 1


def test_a_model_retrying_uncertain_attempts_reserves_a_worst_case_for_each(upstream) -> None:
    raw = orjson.dumps({"model": "large", "messages": MESSAGES, "max_tokens": 100})
    request = parse_request(raw, "chat")
    plan = RoutePlan(tier="passthrough", policy=None, route=None, model="large")
    reserved = []
    for uncertain in (False, True):
        settings = Settings.from_mapping(
            {"models": _one_stage(upstream, uncertain=uncertain), "policy": "/nonexistent.json"}
        )
        gateway = build_gateway(settings)
        reserved.append(gateway.reserve_estimate(plan, request, len(raw)))
        reserved.append(gateway.reserve_tokens(plan, request, len(raw)))
    once_usd, once_tokens, each_usd, each_tokens = reserved
    # max_retries 1: two attempts, each maybe billed its worst case.
    assert (each_usd, each_tokens) == (pytest.approx(2 * once_usd), 2 * once_tokens)
