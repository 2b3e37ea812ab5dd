"""Per-model request defaults through the gateway (openai SDK client, scripted upstream).

``small`` is configured as a fast member and ``large`` as a reasoning member; the upstream records
what each was sent.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config.settings import ConfigError, Settings
from tests.support.gateway_testkit import model_configs
from tests.support.scripted_upstream import ok

USER = [{"role": "user", "content": "What is 17 * 3?"}]
FAST = {"system": "Reply with the number only.", "max_tokens": 8, "temperature": 0}
THINK = {"system": "Think step by step.", "max_tokens": 256, "reasoning_effort": "high"}


def _models(base_url: str) -> dict[str, Any]:
    models = model_configs(base_url)
    models["small"]["request_defaults"] = FAST
    models["large"]["request_defaults"] = THINK
    return models


@pytest.fixture
def member_gateway(start_gateway, make_settings, upstream):
    return start_gateway(make_settings(models=_models(upstream.base_url)))


def test_each_stage_gets_its_own_defaults_under_a_bare_client_request(member_gateway, upstream) -> None:
    upstream.script("up-small", ok("50", confidence=0.3))
    upstream.script("up-large", ok("17 * 3 = 51.\nAnswer: 51"))
    raw = member_gateway.client().chat.completions.with_raw_response.create(model="cascade", messages=USER)
    assert raw.headers["x-cascade-models-called"] == "small,large"
    assert raw.parse().choices[0].message.content.endswith("Answer: 51")
    fast = upstream.calls("up-small")[0].body
    assert fast["messages"] == [{"role": "system", "content": FAST["system"]}, *USER]
    assert (fast["max_tokens"], fast["temperature"]) == (8, 0)
    assert fast["logprobs"] is True and fast["top_logprobs"] == 5  # the gateway's own fields stay
    assert "reasoning_effort" not in fast
    think = upstream.calls("up-large")[0].body
    assert think["messages"] == [{"role": "system", "content": THINK["system"]}, *USER]
    assert (think["max_tokens"], think["reasoning_effort"]) == (256, "high")
    assert "temperature" not in think and "logprobs" not in think


def test_client_fields_and_system_message_win(member_gateway, upstream) -> None:
    upstream.script("up-small", ok("51", confidence=0.99))
    messages = [{"role": "system", "content": "Be terse."}, *USER]
    member_gateway.client().chat.completions.create(
        model="cascade", messages=messages, max_completion_tokens=3, temperature=0.5
    )
    fast = upstream.calls("up-small")[0].body
    assert fast["messages"] == messages
    assert fast["max_completion_tokens"] == 3 and "max_tokens" not in fast
    assert fast["temperature"] == 0.5


def test_streamed_final_stage_gets_its_defaults(member_gateway, upstream) -> None:
    upstream.script("up-small", ok("50", confidence=0.3))
    upstream.script("up-large", ok("Answer: 51"))
    stream = member_gateway.client().chat.completions.create(model="cascade", messages=USER, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "Answer: 51"
    think = upstream.calls("up-large")[0].body
    assert think["stream"] is True and think["max_tokens"] == 256
    assert think["messages"][0] == {"role": "system", "content": THINK["system"]}


def test_direct_model_request_gets_the_members_defaults(member_gateway, upstream) -> None:
    upstream.script("up-large", ok("Answer: 51"))
    completion = member_gateway.client().chat.completions.create(model="large", messages=USER)
    assert completion.model == "large"
    assert upstream.calls("up-large")[0].body["reasoning_effort"] == "high"


def test_spend_reservation_covers_what_defaults_add(make_settings, upstream) -> None:
    from gateway.api.app import build_gateway
    from gateway.routing.tier_choice import RoutePlan
    from gateway.wire.requests import parse_request
    from money.charges import SENT_FIELDS_BYTES

    raw = b'{"model": "small", "messages": [{"role": "user", "content": "What is 17 * 3?"}]}'
    parsed = parse_request(raw, "chat")
    plan = RoutePlan("passthrough", None, None, model="small")
    plain = build_gateway(make_settings()).reserve_estimate(plan, parsed, len(raw))
    with_defaults = make_settings(models=_models(upstream.base_url))
    member = build_gateway(with_defaults).reserve_estimate(plan, parsed, len(raw))
    # small: $0.1/Mtok in, $0.2/Mtok out. Without defaults 4,096 completion tokens are assumed; with
    # them, the member's 8-token cap, and the prompt bound grows by its system message's bytes.
    sent = len(raw) + len("up-small") + SENT_FIELDS_BYTES  # what the gateway adds counts too
    assert plain == pytest.approx((sent * 0.1 + 4096 * 0.2) / 1e6)
    system_bytes = len(FAST["system"].encode())
    assert member >= ((len(raw) + system_bytes) * 0.1 + 8 * 0.2) / 1e6
    assert member < plain


def test_config_refuses_defaults_for_gateway_owned_fields(upstream) -> None:
    models = _models(upstream.base_url)
    models["small"]["request_defaults"] = {"logprobs": True}
    with pytest.raises(ConfigError, match="cannot set logprobs"):
        Settings.from_mapping({"models": models, "policy": "p.json"})
