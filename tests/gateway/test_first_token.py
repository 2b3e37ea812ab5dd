"""docs/contracts.md#faults: a model's first-token deadline (``first_token_timeout_s``).

A stage whose first token is late is cancelled, charged by the one rule and escalated
(``slow_first_token``); at the last stage, a 504 in the API's shape; a stage that started in time
has its whole ``timeout_s``. Lateness is driven by an event (``Reply.hold_first``): the scripted
upstream holds the first chunk until the test releases it, after the gateway gave up.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import openai
import orjson
import pytest

from money import Price
from money.charges import Attempt, CallLimits, attempt_charge, sent_bound
from tests.support.gateway_testkit import model_configs
from tests.support.policy_files import write_policy
from tests.support.scripted_upstream import ScriptedUpstream, ok

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
FIRST_TOKEN_S = 0.2
SMALL_PRICE = Price(input_per_mtok=0.1, output_per_mtok=0.2)  # model_configs' price of small
LONG_ANSWER = "Paris is the capital of France and it has been for a very long time indeed."


@pytest.fixture
def serve_first_token(
    start_gateway: Callable[..., Any], make_settings: Callable[..., Any], upstream: ScriptedUpstream
) -> Callable[..., Any]:
    """``serve_first_token(*models, **model_changes)``: the gateway with a first-token deadline on
    each of ``models`` (and ``model_changes`` on them)."""

    def start(*names: str, **changes: Any) -> Any:
        configs = model_configs(upstream.base_url)
        for name in names:
            configs[name].update(first_token_timeout_s=FIRST_TOKEN_S, **changes)
        return start_gateway(make_settings(models=configs))

    return start


def _create(gateway: Any, **kw: Any) -> Any:
    return gateway.client().chat.completions.with_raw_response.create(
        model=kw.pop("model", "cascade"), messages=MESSAGES, max_tokens=64, **kw
    )


@pytest.mark.parametrize("overrun", [None, 8])
def test_a_cheap_stage_whose_first_token_is_late_escalates_and_is_charged_by_the_rule(
    serve_first_token, upstream: ScriptedUpstream, released: threading.Event, overrun: int | None
) -> None:
    gateway = serve_first_token("small", cancel_overrun_tokens=overrun)
    upstream.script("up-small", ok(hold_first=released))
    raw = _create(gateway)

    assert raw.headers["x-cascade-escalation-reason"] == "slow_first_token"
    assert raw.headers["x-cascade-models-called"] == "small,large"
    assert raw.parse().model == "large"
    (call,) = upstream.calls("up-small")
    assert call.body["stream"] is True and call.body["top_logprobs"] == 5  # streamed, still scored
    # Cancelled before its first token: no usage, so the chunks read (none) plus the declared overrun,
    # or the worst case of what it sent when the model declares none.
    sent = orjson.dumps(call.body)
    cancelled = Attempt(sent, streamed_tokens=0, cancelled=True)
    charge = attempt_charge(SMALL_PRICE, cancelled, CallLimits(cancel_overrun_tokens=overrun))
    if overrun is None:
        assert charge.usd == pytest.approx(sent_bound(SMALL_PRICE, sent).usd)
    assert float(raw.headers["x-cascade-cost-bound-usd"]) == pytest.approx(charge.usd, rel=1e-6)
    billed = float(raw.headers["x-cascade-cost-usd"]) - float(raw.headers["x-cascade-cost-bound-usd"])
    assert billed == pytest.approx(0.001)  # large's answer, billed by its usage
    assert (
        gateway.sample(
            "cascade_escalation_reasons_total", tier="balanced", model="small", reason="slow_first_token"
        )
        == 1
    )


@pytest.mark.parametrize("stream", [False, True])
def test_a_stage_that_started_in_time_is_not_cut_by_the_first_token_deadline(
    serve_first_token, upstream: ScriptedUpstream, stream: bool
) -> None:
    gateway = serve_first_token("small")
    # Its first token comes at once, the rest over about three times the first-token deadline.
    upstream.script("up-small", ok(LONG_ANSWER, chunk_delay_s=FIRST_TOKEN_S / 6))
    raw = _create(gateway, stream=stream)

    assert raw.headers["x-cascade-escalated"] == "false"
    assert raw.headers["x-cascade-models-called"] == "small"
    assert float(raw.headers["x-cascade-score"]) > 0.5  # its streamed logprobs were scored
    assert raw.headers["x-cascade-cost-bound-usd"] == "0"  # billed by its usage
    if not stream:
        assert raw.parse().choices[0].message.content == LONG_ANSWER
    else:
        text = b"".join(raw.http_response.iter_bytes())
        assert b"[DONE]" in text and b"error" not in text


@pytest.mark.parametrize("stream", [False, True])
def test_a_last_stage_whose_first_token_is_late_is_a_clean_timeout(
    serve_first_token, upstream: ScriptedUpstream, released: threading.Event, stream: bool
) -> None:
    gateway = serve_first_token("large")
    upstream.script("up-large", ok(hold_first=released))
    with pytest.raises(openai.APIStatusError) as raised:
        _create(gateway, model="cascade/direct", stream=stream)

    assert raised.value.status_code == 504
    assert raised.value.body["code"] == "upstream_timeout"  # type: ignore[index]
    assert "first token" in raised.value.message


def test_a_prefix_tiers_cheap_stage_whose_first_token_is_late_escalates(
    start_gateway, make_settings, upstream: ScriptedUpstream, released: threading.Event, tmp_path
) -> None:
    configs = model_configs(upstream.base_url)
    configs["small"].update(first_token_timeout_s=FIRST_TOKEN_S, cancel_overrun_tokens=8)
    policy = write_policy(tmp_path / "prefix.json", {"balanced": {"commit": {"rule": "prefix", "tokens": 3}}})
    gateway = start_gateway(make_settings(policy, models=configs))
    upstream.script("up-small", ok(LONG_ANSWER, hold_first=released))
    upstream.script("up-large", ok("Paris, from large."))
    raw = _create(gateway, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)

    assert text == "Paris, from large."
    assert raw.headers["x-cascade-escalation-reason"] == "slow_first_token"
    assert raw.headers["x-cascade-models-called"] == "small,large"
    (call,) = upstream.calls("up-small")
    cancelled = Attempt(orjson.dumps(call.body), streamed_tokens=0, cancelled=True)
    charge = attempt_charge(SMALL_PRICE, cancelled, CallLimits(cancel_overrun_tokens=8))
    assert float(raw.headers["x-cascade-cost-bound-usd"]) == pytest.approx(charge.usd, rel=1e-6)
