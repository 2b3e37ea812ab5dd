"""Every upstream attempt that may have been billed is charged (money/charges.py, attempt_charge),
the cap a call is sent is the cap it reserved, and image parts are bounded or refused.

Through the app under uvicorn in front of the scripted upstream, which keeps what a provider bills
whatever the client did (``ScriptedUpstream.billed``). Every model is priced per token, so every
charge is exact: a fault's charge is the worst case of the request as sent, never less than billed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest
from learning_support import learning_block, registry_value

from money import Price
from money.charges import DEFAULT_COMPLETION_BOUND, sent_bound
from tests.support.gateway_logs import captured_request_line
from tests.support.gateway_testkit import RunningGateway, model_configs, post_and_leave, until
from tests.support.money import priced_usd
from tests.support.policy_files import write_policy
from tests.support.ports import free_port
from tests.support.scripted_upstream import ScriptedUpstream, error, ok
from traffic.judges.base import JudgeError
from traffic.judges.llm import LLMJudge

MESSAGES = [{"role": "user", "content": "What is 6 * 7?"}]
# USD per million (input, output) tokens, by upstream id.
PRICES = {"up-small": (0.5, 1.0), "up-medium": (2.0, 4.0), "up-large": (10.0, 30.0)}
TIMEOUT_S = 0.5
# The faults of an attempt after its request was sent: none of them may be retried.
FAULTS = {
    "timeout_before_headers": ok(usage=(20, 40), delay_s=1.5),
    "timeout_mid_body": ok(usage=(20, 40), stall_body_s=1.5),
    "cut_body": ok(usage=(20, 40), cut_body_at=30),
    "connection_drop": ok(usage=(20, 40), drop_connection=True),
}


def price(model_id: str) -> Price:
    prompt, completion = PRICES[model_id]
    return Price(input_per_mtok=prompt, output_per_mtok=completion)


def models(base_url: str, **changes: Any) -> dict[str, Any]:
    """The test models priced per token, ``timeout_s`` short, ``changes`` on every one."""
    configs = model_configs(base_url)
    for config in configs.values():
        prompt, completion = PRICES[config["model"]]
        config.update(price={"input_per_mtok": prompt, "output_per_mtok": completion}, timeout_s=TIMEOUT_S)
        config.update(changes)
    return configs


@pytest.fixture
def serve(
    start_gateway: Callable[..., Any],
    start_served_gateway: Callable[..., RunningGateway],
    make_settings: Callable[..., Any],
    upstream: ScriptedUpstream,
    tmp_path,
) -> Callable[..., Any]:
    """``serve(scorer=None, models=None, on_loopback=False, **changes)``: the gateway (request log
    lines on; in-process, or under uvicorn on loopback), the test policy scored by ``scorer`` when given."""

    def start(scorer: dict[str, Any] | None = None, on_loopback: bool = False, **changes: Any) -> Any:
        policy = write_policy(tmp_path / "policy.json", **({"scorer": scorer} if scorer else {}))
        changes.setdefault("models", models(upstream.base_url))
        changes.setdefault("logging", {"level": "info"})
        settings = make_settings(policy=policy, **changes)
        return start_served_gateway(settings) if on_loopback else start_gateway(settings)

    return start


def post(gateway: Any, body: dict[str, Any], path: str = "/v1/chat/completions") -> httpx.Response:
    return gateway.http.post(path, content=orjson.dumps(body), timeout=20)


def worst_case(upstream: ScriptedUpstream, model_id: str) -> float:
    """Sum of the worst cases of every request ``model_id`` was sent (money.charges.sent_bound)."""
    return sum(sent_bound(price(model_id), orjson.dumps(c.body)).usd for c in upstream.calls(model_id))


def billed(upstream: ScriptedUpstream) -> float:
    return priced_usd(upstream.billed, PRICES)


# -- every attempt that may have been billed ----------------------------------------------------


@pytest.mark.parametrize("fault", list(FAULTS))
def test_an_attempt_broken_after_it_was_sent_is_charged_its_worst_case_once(
    serve, upstream: ScriptedUpstream, capfd, fault: str
) -> None:
    upstream.set_default("up-large", FAULTS[fault])
    gateway = serve()
    response = post(gateway, {"model": "large", "messages": MESSAGES, "max_tokens": 64})

    assert response.status_code in (502, 504)
    line = captured_request_line(capfd)
    assert len(upstream.calls("up-large")) == 1  # never retried: a retry would be a second bill
    assert billed(upstream) > 0
    assert line["cost_usd"] == pytest.approx(worst_case(upstream, "up-large"), rel=1e-9)
    assert line["cost_usd"] >= billed(upstream)
    assert line["cost_usd"] <= line["worst_case_usd"] * (1 + 1e-9)


@pytest.mark.parametrize("fault", ["timeout_before_headers", "connection_drop"])
def test_a_streamed_stage_broken_before_its_answer_began_is_charged_its_worst_case(
    serve, upstream: ScriptedUpstream, capfd, fault: str
) -> None:
    upstream.set_default("up-large", FAULTS[fault])
    gateway = serve()
    response = post(gateway, {"model": "large", "messages": MESSAGES, "max_tokens": 64, "stream": True})

    assert response.status_code in (502, 504)
    line = captured_request_line(capfd)
    assert len(upstream.calls("up-large")) == 1
    assert line["cost_usd"] == pytest.approx(worst_case(upstream, "up-large"), rel=1e-9)
    assert line["cost_usd"] >= billed(upstream)


def test_a_streamed_stage_whose_client_leaves_before_its_answer_began_is_charged_its_worst_case(
    serve, upstream: ScriptedUpstream, capfd
) -> None:
    upstream.set_default("up-large", ok(usage=(20, 40), delay_s=3.0))
    # The client leaves: a real socket (in-process, the client cannot go away mid-request).
    gateway = serve(models=models(upstream.base_url, timeout_s=10), on_loopback=True)
    body = {"model": "large", "messages": MESSAGES, "max_tokens": 64, "stream": True}
    # The client gives up while the upstream thinks (the stage's answer has not begun).
    post_and_leave(gateway.url + "/v1/chat/completions", body, lambda: bool(upstream.calls("up-large")))

    line = captured_request_line(capfd)
    assert line["status"] == 499
    assert line["cost_usd"] == pytest.approx(worst_case(upstream, "up-large"), rel=1e-9)
    assert line["cost_usd"] >= billed(upstream)


def test_a_cheap_stage_that_times_out_is_charged_and_so_is_its_escalation(
    serve, upstream: ScriptedUpstream, capfd
) -> None:
    upstream.set_default("up-small", FAULTS["timeout_before_headers"])
    upstream.set_default("up-large", ok("42", usage=(20, 2)))
    gateway = serve()
    response = post(gateway, {"model": "cascade", "messages": MESSAGES, "max_tokens": 64})

    assert response.status_code == 200
    assert response.headers["x-cascade-models-called"] == "small,large"
    line = captured_request_line(capfd)
    charged = float(response.headers["x-cascade-cost-usd"])
    assert charged == pytest.approx(worst_case(upstream, "up-small") + (20 * 10.0 + 2 * 30.0) / 1e6, rel=1e-9)
    assert charged >= billed(upstream) and line["cost_usd"] == pytest.approx(charged)


@pytest.mark.parametrize("stream", [False, True])
def test_the_worst_case_of_a_reset_attempt_is_told_apart_from_the_billed_cost(
    serve, upstream: ScriptedUpstream, capfd, stream: bool
) -> None:
    upstream.set_default("up-small", FAULTS["connection_drop"])
    upstream.set_default("up-large", ok("42", usage=(20, 2)))
    gateway = serve()
    body = {"model": "cascade", "messages": MESSAGES, "max_tokens": 64, "stream": stream}
    response = post(gateway, body)

    assert response.status_code == 200
    line = captured_request_line(capfd)
    # large's answer, priced by the usage it reported (the usage its stream reported, streamed)
    billed_usd = priced_usd([p for p in upstream.produced if p.model == "up-large"], PRICES)
    bound = worst_case(upstream, "up-small")
    assert float(response.headers["x-cascade-cost-bound-usd"]) == pytest.approx(bound, rel=1e-9)
    # A stream's headers are its start: the cost so far (the final chunk and the log have it all).
    so_far = bound if stream else bound + billed_usd
    assert float(response.headers["x-cascade-cost-usd"]) == pytest.approx(so_far, rel=1e-9)
    assert line["cost_bound_usd"] == pytest.approx(bound, rel=1e-9)
    assert line["cost_usd"] - line["cost_bound_usd"] == pytest.approx(billed_usd, rel=1e-6)


def test_a_request_whose_attempts_all_reported_usage_has_no_bound_in_its_cost(
    serve, upstream: ScriptedUpstream, capfd
) -> None:
    upstream.set_default("up-small", ok("42", confidence=0.2, usage=(20, 2)))
    upstream.set_default("up-large", ok("42", usage=(20, 2)))
    response = post(serve(), {"model": "cascade", "messages": MESSAGES, "max_tokens": 64})

    assert response.headers["x-cascade-models-called"] == "small,large"
    assert response.headers["x-cascade-cost-bound-usd"] == "0"
    assert float(response.headers["x-cascade-cost-usd"]) > 0
    assert captured_request_line(capfd)["cost_bound_usd"] == 0


def test_attempts_answered_with_an_error_status_are_retried_and_cost_nothing(
    serve, upstream: ScriptedUpstream
) -> None:
    upstream.script("up-large", error(503), ok("42", usage=(20, 2)))
    gateway = serve()
    response = post(gateway, {"model": "large", "messages": MESSAGES, "max_tokens": 64})

    assert response.status_code == 200 and len(upstream.calls("up-large")) == 2
    assert float(response.headers["x-cascade-cost-usd"]) == pytest.approx((20 * 10.0 + 2 * 30.0) / 1e6)


def test_a_connection_refused_before_sending_is_retried_and_costs_nothing(
    serve, upstream: ScriptedUpstream, capfd
) -> None:
    closed = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    gateway = serve(models=models(upstream.base_url) | {"large": models(closed)["large"]})
    response = post(gateway, {"model": "large", "messages": MESSAGES, "max_tokens": 64})

    assert response.status_code == 502
    assert captured_request_line(capfd)["cost_usd"] == 0.0
    attempts = gateway.metrics()["cascade_upstream_requests"].samples
    errors = [s.value for s in attempts if s.labels.get("model") == "large" and s.labels["status"] == "error"]
    assert errors == [2.0]  # the attempt and its one retry (max_retries: 1)


SCORERS: dict[str, tuple[dict[str, Any], str, str]] = {
    # scorer, the upstream id of its extra call, what the request's models_called says
    "verifier": (
        {"name": "verifier", "top_k": 5, "verifier": {"model": "medium"}},
        "up-medium",
        "small,medium,large",
    ),
    "self_report": ({"name": "self_report"}, "up-small", "small,small,large"),
    "consistency": (
        {"name": "consistency", "samples": 2, "temperature": 0.7, "equivalence": "numeric"},
        "up-small",
        "small,small,small,large",
    ),
}


@pytest.mark.parametrize("scorer", list(SCORERS))
def test_a_black_box_scorer_call_that_times_out_is_charged_and_listed(
    serve, upstream: ScriptedUpstream, capfd, scorer: str
) -> None:
    spec, scorer_id, called = SCORERS[scorer]
    stage = ok("42", confidence=None, usage=(14, 2))
    if scorer_id == "up-small":
        upstream.script("up-small", stage)  # the stage answers; every later call times out
    else:
        upstream.script("up-small", stage)
        upstream.set_default("up-medium", FAULTS["timeout_before_headers"])
    upstream.set_default("up-small", FAULTS["timeout_before_headers"])
    upstream.set_default("up-large", ok("6 * 7 = 42", usage=(20, 9)))
    gateway = serve(scorer=spec)
    response = post(gateway, {"model": "cascade", "messages": MESSAGES, "max_tokens": 16})

    assert response.status_code == 200
    assert response.headers["x-cascade-models-called"] == called
    line = captured_request_line(capfd)
    assert line["models_called"] == called.split(",")
    assert line["escalation_reasons"] == ["scorer_failed"]
    scorer_calls = upstream.calls(scorer_id)[1:] if scorer_id == "up-small" else upstream.calls(scorer_id)
    worst = sum(sent_bound(price(scorer_id), orjson.dumps(c.body)).usd for c in scorer_calls)
    expected = (14 * 0.5 + 2 * 1.0) / 1e6 + worst + (20 * 10.0 + 9 * 30.0) / 1e6
    assert float(response.headers["x-cascade-cost-usd"]) == pytest.approx(expected, rel=1e-9)
    assert line["cost_usd"] >= billed(upstream) and line["cost_usd"] <= line["worst_case_usd"]


def test_a_shadow_call_that_times_out_is_charged_its_worst_case(
    serve, upstream: ScriptedUpstream, tmp_path
) -> None:
    upstream.set_default("up-small", ok("42", usage=(14, 2)))
    upstream.set_default("up-medium", FAULTS["timeout_before_headers"])  # medium is only shadowed
    gateway = serve(learning=learning_block(f"file://{tmp_path / 'traffic.jsonl'}"))
    assert post(gateway, {"model": "cascade", "messages": MESSAGES, "max_tokens": 16}).status_code == 200

    registry = gateway.gateway
    assert until(lambda: registry_value(registry, "cascade_shadow_calls_total", outcome="timeout") >= 1, 10)
    (call,) = upstream.calls("up-medium")
    shadow_cost = registry_value(registry, "cascade_shadow_cost_usd_total", model="medium")
    assert shadow_cost == pytest.approx(sent_bound(price("up-medium"), orjson.dumps(call.body)).usd)
    assert shadow_cost >= priced_usd([p for p in upstream.billed if p.model == "up-medium"], PRICES)


async def test_an_llm_judge_call_that_times_out_carries_its_worst_case(upstream: ScriptedUpstream) -> None:
    upstream.set_default("up-large", FAULTS["timeout_before_headers"])
    judge = LLMJudge(upstream.base_url, "up-large", price=price("up-large"), timeout_s=TIMEOUT_S)
    try:
        with pytest.raises(JudgeError) as caught:
            await judge.judge("What is 6 * 7?", "42", "41")
    finally:
        await judge.aclose()
    (call,) = upstream.calls("up-large")
    assert caught.value.cost_usd == pytest.approx(sent_bound(price("up-large"), orjson.dumps(call.body)).usd)
    assert caught.value.cost_usd >= priced_usd(upstream.billed, PRICES) > 0


# -- the cap reserved is the cap sent -------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": "large", "messages": MESSAGES}),
        ("/v1/chat/completions", {"model": "large", "messages": MESSAGES, "n_predict": -1}),
        ("/v1/responses", {"model": "large", "input": "What is 6 * 7?"}),
    ],
    ids=["chat", "chat-unbounded-n_predict", "responses"],
)
def test_a_request_without_a_cap_is_sent_the_models_default_cap_it_reserved(
    serve, upstream: ScriptedUpstream, capfd, path: str, body: dict[str, Any]
) -> None:
    upstream.set_default("up-large", ok("42", usage=(20, 20_000), honour_cap=True))
    gateway = serve(models=models(upstream.base_url, default_max_tokens=300))
    response = post(gateway, body, path)

    assert response.status_code == 200
    (call,) = upstream.calls("up-large")
    assert call.body["max_tokens"] == 300 and "n_predict" not in call.body
    line = captured_request_line(capfd)
    # The answer billed what the cap allowed: 300 tokens, not 20,000.
    assert line["cost_usd"] == pytest.approx((20 * 10.0 + 300 * 30.0) / 1e6)
    assert line["worst_case_usd"] >= line["cost_usd"]
    assert line["worst_case_usd"] < (20_000 * 30.0) / 1e6


def test_the_default_cap_is_4096_and_a_clients_cap_is_sent_as_it_is(
    serve, upstream: ScriptedUpstream
) -> None:
    gateway = serve()
    post(gateway, {"model": "large", "messages": MESSAGES})
    post(gateway, {"model": "large", "messages": MESSAGES, "max_completion_tokens": 77})
    uncapped, capped = upstream.calls("up-large")
    assert uncapped.body["max_tokens"] == DEFAULT_COMPLETION_BOUND
    assert capped.body["max_completion_tokens"] == 77 and "max_tokens" not in capped.body


# -- image parts ----------------------------------------------------------------------------------

IMAGE = {"type": "image_url", "image_url": {"url": "https://i.example/cat.png"}}
IMAGE_REQUESTS = {
    "chat": ("/v1/chat/completions", {"model": "large", "max_tokens": 8, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "A cat?"}, IMAGE, IMAGE]}
    ]}),
    "responses": ("/v1/responses", {"model": "large", "max_output_tokens": 8, "input": [
        {"role": "user", "content": [
            {"type": "input_text", "text": "A cat?"},
            *[{"type": "input_image", "image_url": "https://i.example/cat.png"}] * 2,
        ]}
    ]}),
    "messages": ("/v1/messages", {"model": "large", "max_tokens": 8, "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "A cat?"},
            *[{"type": "image", "source": {"type": "url", "url": "https://i.example/cat.png"}}] * 2,
        ]}
    ]}),
}  # fmt: skip


@pytest.mark.parametrize("api", list(IMAGE_REQUESTS))
def test_an_image_on_a_model_declaring_no_bound_is_a_400_in_the_apis_shape(
    serve, upstream: ScriptedUpstream, api: str
) -> None:
    gateway = serve()
    path, body = IMAGE_REQUESTS[api]
    response = post(gateway, body, path)

    assert response.status_code == 400
    assert upstream.calls() == []
    error_body = response.json()
    if api == "messages":
        assert error_body["type"] == "error" and error_body["error"]["type"] == "invalid_request_error"
    else:
        assert error_body["error"]["code"] == "unsupported_input"
    assert "part_tokens.image" in json.dumps(error_body)


@pytest.mark.parametrize("api", list(IMAGE_REQUESTS))
def test_an_image_is_reserved_at_the_models_declared_bound(
    serve, upstream: ScriptedUpstream, capfd, api: str
) -> None:
    upstream.set_default("up-large", ok("yes", usage=(20, 3), image_tokens=1600, honour_cap=True))
    gateway = serve(models=models(upstream.base_url, part_tokens={"image": 1600}))
    path, body = IMAGE_REQUESTS[api]
    assert post(gateway, body, path).status_code == 200

    line = captured_request_line(capfd)
    assert line["cost_usd"] == pytest.approx(((20 + 2 * 1600) * 10.0 + 3 * 30.0) / 1e6)
    assert line["worst_case_usd"] >= line["cost_usd"] >= billed(upstream)
    assert line["worst_case_usd"] >= 2 * 1600 * 10.0 / 1e6


def test_a_shadow_model_declaring_no_image_bound_is_not_called(
    serve, upstream: ScriptedUpstream, tmp_path
) -> None:
    configs = models(upstream.base_url, part_tokens={"image": 1600})
    del configs["medium"]["part_tokens"]
    gateway = serve(models=configs, learning=learning_block(f"file://{tmp_path / 'traffic.jsonl'}"))
    path, body = IMAGE_REQUESTS["chat"]
    assert post(gateway, {**body, "model": "cascade"}, path).status_code == 200
    registry = gateway.gateway
    assert until(lambda: registry_value(registry, "cascade_shadow_calls_total", model="large") >= 1, 10)
    assert upstream.calls("up-medium") == []
