"""docs/contracts.md#faults: after a timeout, no stage served by the same upstream is called.

Two pool members of one llama-server (same ``base_url`` and ``model``) share its queue and the
request's deadline: a stage escalated to after the other timed out would start the whole prompt
again behind the abandoned call. Here ``medium`` is configured on the scripted upstream's model id
of ``small`` (or of ``large``), as ``cascade demo`` configures a fast and a reasoning member.
"""

from __future__ import annotations

import openai
import pytest

from tests.support.gateway_testkit import model_configs
from tests.support.scripted_upstream import Reply, error, ok

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
SLOW = Reply(delay_s=2)  # an answer that comes after the 0.3 s timeout of the stage


def _models(base_url: str, *, medium_on: str, timeout_of: str) -> dict:
    """The test models with ``medium`` served by ``medium_on``'s upstream model id and a short
    timeout on the model ``timeout_of`` and on ``medium``."""
    models = model_configs(base_url)
    models["medium"]["model"] = models[medium_on]["model"]
    for name in (timeout_of, "medium"):
        models[name]["timeout_s"] = 0.3
    return models


def _create(gateway, tier: str):
    return gateway.client().chat.completions.with_raw_response.create(
        model=f"cascade/{tier}", messages=MESSAGES
    )


def test_a_timeout_skips_the_next_stage_on_the_same_upstream(start_gateway, make_settings, upstream) -> None:
    gateway = start_gateway(
        make_settings(models=_models(upstream.base_url, medium_on="small", timeout_of="small"))
    )
    upstream.script("up-small", SLOW, ok("not asked again", confidence=0.99))
    upstream.script("up-large", ok("Paris.", confidence=0.99))
    raw = _create(gateway, "chain")  # small -> medium -> large; small and medium share up-small
    assert raw.headers["x-cascade-models-called"] == "small,large"
    assert raw.parse().choices[0].message.content == "Paris."
    assert len(upstream.calls("up-small")) == 1
    assert raw.headers["x-cascade-escalation-reason"] == "upstream_error"
    assert (
        gateway.sample("cascade_escalations_total", tier="chain", from_model="small", to_model="large") == 1
    )
    assert (
        gateway.sample("cascade_escalations_total", tier="chain", from_model="small", to_model="medium") == 0
    )


def test_a_timeout_with_only_same_upstream_stages_left_is_a_504(
    start_gateway, make_settings, write_policy, upstream
) -> None:
    fast_then_think = {
        "balanced": {"routes": [{"weight": 1.0, "models": ["small", "medium"], "thresholds": [0.5]}]}
    }
    models = _models(upstream.base_url, medium_on="small", timeout_of="small")
    gateway = start_gateway(make_settings(write_policy(tier_changes=fast_then_think), models=models))
    upstream.script("up-small", SLOW, ok("not asked again", confidence=0.99))
    with pytest.raises(openai.APIStatusError) as info:
        _create(gateway, "balanced")
    assert info.value.status_code == 504
    assert info.value.body["code"] == "upstream_timeout"
    assert len(upstream.calls("up-small")) == 1
    assert gateway.sample("cascade_requests_total", tier="balanced", outcome="error") == 1
    assert gateway.sample("cascade_upstream_requests_total", model="medium", status="timeout") == 0


def test_a_skipped_final_stage_falls_back_to_the_last_good_answer(
    start_gateway, make_settings, upstream
) -> None:
    # small -> medium -> large, medium and large share up-large: small is unsure, medium times out,
    # large is skipped, small's answer is returned degraded (the test policy allows it).
    gateway = start_gateway(
        make_settings(models=_models(upstream.base_url, medium_on="large", timeout_of="large"))
    )
    upstream.script("up-small", ok("Lyon?", confidence=0.3))
    upstream.script("up-large", SLOW, ok("not asked again", confidence=0.99))
    raw = _create(gateway, "chain")
    assert raw.headers["x-cascade-models-called"] == "small,medium"
    assert raw.headers["x-cascade-degraded"] == "true"
    assert raw.headers["x-cascade-model"] == "small"
    assert raw.parse().choices[0].message.content == "Lyon?"
    assert len(upstream.calls("up-large")) == 1


def test_a_skipped_final_stage_is_a_504_when_the_policy_forbids_degraded(
    start_gateway, make_settings, write_policy, upstream
) -> None:
    models = _models(upstream.base_url, medium_on="large", timeout_of="large")
    gateway = start_gateway(make_settings(write_policy(allow_degraded=False), models=models))
    upstream.script("up-small", ok("Lyon?", confidence=0.3))
    upstream.script("up-large", SLOW)
    with pytest.raises(openai.APIStatusError) as info:
        _create(gateway, "chain")
    assert info.value.status_code == 504
    assert len(upstream.calls("up-large")) == 1


def test_a_streamed_request_skips_the_same_upstream_stage_too(start_gateway, make_settings, upstream) -> None:
    gateway = start_gateway(
        make_settings(models=_models(upstream.base_url, medium_on="small", timeout_of="small"))
    )
    upstream.script("up-small", SLOW)
    upstream.script("up-large", ok("Paris.", confidence=0.99))
    stream = gateway.client().chat.completions.create(model="cascade/chain", messages=MESSAGES, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "Paris."
    assert len(upstream.calls("up-small")) == 1
    assert upstream.calls("up-large")[0].body["stream"] is True


def test_other_failures_still_escalate_to_a_stage_on_the_same_upstream(
    start_gateway, make_settings, upstream
) -> None:
    # A 5xx is not a busy server: the next member of the same upstream is still asked.
    gateway = start_gateway(
        make_settings(models=_models(upstream.base_url, medium_on="small", timeout_of="small"))
    )
    upstream.script("up-small", error(500), error(500), error(500), ok("Paris.", confidence=0.99))
    raw = _create(gateway, "chain")
    assert raw.headers["x-cascade-models-called"] == "small,medium"
    assert raw.parse().choices[0].message.content == "Paris."
    assert upstream.calls("up-large") == []
