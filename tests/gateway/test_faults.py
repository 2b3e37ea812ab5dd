"""docs/contracts.md#faults: upstream faults, degraded answers, retries, Retry-After, client disconnects."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import httpx
import openai
import pytest

from gateway.api.app import create_app
from gateway.api.request_cycle import CONNECTION_LOST, ON_DISCONNECT
from gateway.api.serving import gateway_http_protocol
from gateway.config.settings import LimitsConfig
from tests.support.data_files import UPSTREAM_ANSWERS
from tests.support.gateway_logs import captured_request_line
from tests.support.gateway_testkit import RunningGateway, model_configs, post_and_leave, serving
from tests.support.ports import free_port
from tests.support.scripted_upstream import Reply, error, ok

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def _dead_url() -> str:
    """A loopback URL where nothing listens (connection refused)."""
    port = free_port()
    return f"http://127.0.0.1:{port}/v1"


def _create(gateway, **kw):
    return gateway.client().chat.completions.with_raw_response.create(
        model=kw.pop("model", "cascade"), messages=MESSAGES, **kw
    )


def test_cheap_5xx_is_retried_then_escalated_and_counted(gateway, upstream) -> None:
    upstream.script("up-small", error(503), error(500), error(502))
    raw = _create(gateway)
    assert raw.headers["x-cascade-models-called"] == "small,large"
    assert raw.headers["x-cascade-escalated"] == "true"
    assert raw.headers["x-cascade-score"] == "none"
    assert len(upstream.calls("up-small")) == 3  # 1 + max_retries (2)
    assert (
        gateway.sample("cascade_escalations_total", tier="balanced", from_model="small", to_model="large")
        == 1
    )
    assert gateway.sample("cascade_upstream_requests_total", model="small", status="5xx") == 3


def test_cheap_5xx_recovers_within_retries(gateway, upstream) -> None:
    upstream.script("up-small", error(503), ok(confidence=0.99))
    raw = _create(gateway)
    assert raw.headers["x-cascade-models-called"] == "small"
    assert len(upstream.calls("up-small")) == 2


def test_cheap_timeout_escalates(start_gateway, make_settings, upstream) -> None:
    models = model_configs(upstream.base_url)
    models["small"]["timeout_s"] = 0.3
    gateway = start_gateway(make_settings(models=models))
    upstream.script("up-small", Reply(delay_s=2))  # would be a confident answer, had it been awaited
    raw = _create(gateway)
    assert raw.headers["x-cascade-models-called"] == "small,large"
    assert gateway.sample("cascade_upstream_requests_total", model="small", status="timeout") == 1


def test_cheap_connection_refused_escalates(start_gateway, make_settings, upstream) -> None:
    models = model_configs(upstream.base_url)
    models["small"]["base_url"] = _dead_url()
    gateway = start_gateway(make_settings(models=models))
    raw = _create(gateway)
    assert raw.headers["x-cascade-models-called"] == "small,large"
    assert raw.parse().model == "large"


def test_expensive_failure_returns_degraded_cheap_answer(gateway, upstream) -> None:
    upstream.script("up-small", ok("cheap guess", confidence=0.3))
    upstream.script("up-large", error(500), error(500))
    raw = _create(gateway)
    assert raw.headers["x-cascade-degraded"] == "true"
    assert raw.headers["x-cascade-model"] == "small"
    assert raw.headers["x-cascade-models-called"] == "small,large"
    assert raw.parse().choices[0].message.content == "cheap guess"
    assert raw.parse().model == "small"


def test_expensive_failure_is_502_when_policy_forbids_degraded(
    start_gateway, make_settings, write_policy, upstream
) -> None:
    gateway = start_gateway(make_settings(write_policy(allow_degraded=False)))
    upstream.script("up-small", ok(confidence=0.3))
    upstream.script("up-large", error(500), error(500))
    with pytest.raises(openai.APIStatusError) as info:
        _create(gateway)
    assert info.value.status_code == 502
    assert info.value.body["type"] == "upstream_error"
    assert gateway.sample("cascade_requests_total", tier="balanced", outcome="error") == 1


def test_expensive_timeout_is_504_when_nothing_else_can_answer(
    start_gateway, make_settings, upstream
) -> None:
    models = model_configs(upstream.base_url)
    models["large"]["timeout_s"] = 0.3
    gateway = start_gateway(make_settings(models=models))
    upstream.script("up-large", Reply(delay_s=2))
    with pytest.raises(openai.APIStatusError) as info:
        _create(gateway, model="cascade/direct")
    assert info.value.status_code == 504


def test_all_stages_failing_is_502(gateway, upstream) -> None:
    upstream.script("up-small", *[error(500)] * 3)
    upstream.script("up-large", *[error(500)] * 2)
    with pytest.raises(openai.InternalServerError) as info:
        _create(gateway)
    assert info.value.status_code == 502


def test_retry_after_is_honoured_within_the_deadline(gateway, upstream) -> None:
    upstream.script("up-small", error(429, retry_after=1), ok(confidence=0.99))
    started = time.monotonic()
    raw = _create(gateway)
    assert time.monotonic() - started >= 0.95
    assert raw.headers["x-cascade-models-called"] == "small"
    assert gateway.sample("cascade_upstream_requests_total", model="small", status="429") == 1


def test_retry_after_beyond_the_deadline_escalates_without_waiting(gateway, upstream) -> None:
    upstream.script("up-small", error(429, retry_after=3600))
    raw = _create(gateway)  # waiting the hour would run into the request deadline and fail (504)
    assert raw.headers["x-cascade-models-called"] == "small,large"
    assert len(upstream.calls("up-small")) == 1


def test_passthrough_429_past_deadline_is_429_with_retry_after(gateway, upstream) -> None:
    upstream.script("up-medium", error(429, retry_after=3600))
    with pytest.raises(openai.RateLimitError) as info:
        _create(gateway, model="medium")
    assert info.value.response.headers["retry-after"] == "3600"


def test_answer_without_logprobs_follows_on_missing_score(gateway, upstream) -> None:
    upstream.script("up-small", ok(confidence=None))
    raw = _create(gateway)
    assert raw.headers["x-cascade-score"] == "none"
    assert raw.headers["x-cascade-models-called"] == "small,large"


def test_malformed_upstream_json_is_a_failure_never_passed_through(gateway, upstream) -> None:
    upstream.script("up-small", Reply(raw=b'{"choices": [ oops'))
    raw = _create(gateway)
    assert raw.headers["x-cascade-models-called"] == "small,large"
    assert gateway.sample("cascade_upstream_requests_total", model="small", status="malformed") == 1

    upstream.script("up-medium", Reply(raw=b"not json at all"))
    with pytest.raises(openai.APIStatusError) as info:
        _create(gateway, model="medium")
    assert info.value.status_code == 502
    assert "not json" not in str(info.value.body)


def test_upstream_rejecting_the_request_is_a_client_error_on_passthrough(gateway, upstream) -> None:
    upstream.script("up-medium", Reply(status=400, body={"error": {"message": "n must be 1"}}))
    with pytest.raises(openai.BadRequestError) as info:
        _create(gateway, model="medium", n=3)
    assert "n must be 1" in info.value.body["message"]


@pytest.mark.parametrize("status", [302, 307, 308])
def test_upstream_redirects_are_failures_never_followed(gateway, upstream, status) -> None:
    # 307/308 would re-post the prompt to the Location; it points back at the upstream, so a
    # followed redirect would show up as a second recorded call.
    location = upstream.base_url + "/chat/completions"
    upstream.script("up-small", Reply(status=status, headers={"Location": location}))
    raw = _create(gateway)
    assert raw.headers["x-cascade-models-called"] == "small,large"  # escalated past the failure
    assert len(upstream.calls("up-small")) == 1
    assert gateway.sample("cascade_upstream_requests_total", model="small", status="error") == 1

    upstream.script("up-medium", Reply(status=status, headers={"Location": location}))
    with pytest.raises(openai.APIStatusError) as info:
        _create(gateway, model="medium")
    assert info.value.status_code == 502 and "redirect" in info.value.body["message"]
    assert len(upstream.calls("up-medium")) == 1

    upstream.script("up-medium", Reply(status=status, headers={"Location": location}))
    with pytest.raises(openai.APIStatusError) as info:
        gateway.client().chat.completions.create(model="medium", messages=MESSAGES, stream=True)
    assert info.value.status_code == 502
    assert len(upstream.calls("up-medium")) == 2


def test_real_llamacpp_answer_is_scored(gateway, upstream) -> None:
    import orjson

    body = orjson.loads((UPSTREAM_ANSWERS / "native_smol_top15.json").read_bytes())
    upstream.script("up-small", Reply(body=body))
    raw = _create(gateway)
    assert raw.headers["x-cascade-score"] != "none"
    assert raw.parse().model in {"small", "large"}


@pytest.fixture(params=["uvicorn protocol", "cascade serve protocol"])
def disconnect_gateway(request, make_settings) -> Iterator[RunningGateway]:
    """The served gateway under uvicorn's httptools protocol (the app's watcher task sees the
    disconnect) and under ``cascade serve``'s (the protocol's disconnect hook tells the app)."""
    http = "httptools" if request.param == "uvicorn protocol" else gateway_http_protocol(LimitsConfig())
    with serving(http) as serve_app:
        yield serve_app(create_app(make_settings()))


def test_client_disconnect_cancels_the_upstream_call(disconnect_gateway, upstream) -> None:
    gateway = disconnect_gateway  # a real socket: the client goes away
    upstream.script("up-small", Reply(delay_s=3))
    body = {"model": "cascade", "messages": MESSAGES}
    post_and_leave(gateway.url + "/v1/chat/completions", body, lambda: bool(upstream.calls("up-small")))
    assert upstream.wait_for(lambda: "up-small" in upstream.cancelled, timeout_s=3)
    assert upstream.calls("up-large") == []  # no escalation after the client is gone
    assert upstream.wait_for(
        lambda: gateway.sample("cascade_requests_total", tier="balanced", outcome="error") == 1
    )


def test_a_client_that_leaves_while_admitted_starts_no_upstream_call(make_settings, upstream, capfd) -> None:
    # Under ``cascade serve`` the protocol tells the app of a lost connection through a hook the
    # app stores once the request is admitted; a client gone before then must not be served to
    # nobody. Admission is held (at authentication, a seam) until the protocol saw the loss.
    with serving(gateway_http_protocol(LimitsConfig())) as serve_app:
        gateway = serve_app(create_app(make_settings(logging={"level": "info"})))
        shared = gateway.gateway.shared
        admitted, real = shared.authenticator, shared.authenticator.authenticate
        entered: list[bool] = []

        async def authenticate_once_the_client_left(credential: Any, scope: Any) -> Any:
            entered.append(True)
            while scope.get(ON_DISCONNECT) is not CONNECTION_LOST:
                await asyncio.sleep(0.005)
            return await real(credential, scope)

        admitted.authenticate = authenticate_once_the_client_left
        body = {"model": "cascade", "messages": MESSAGES}
        post_and_leave(gateway.url + "/v1/chat/completions", body, lambda: bool(entered))
        line = captured_request_line(capfd)
        assert line["status"] == 499 and not line.get("cost_usd"), line  # no call, nothing charged
        assert upstream.calls() == []  # nothing was sent for a client already gone


def test_a_call_cut_by_a_client_disconnect_is_charged_its_bound(disconnect_gateway, upstream) -> None:
    gateway = disconnect_gateway  # a real socket: the client goes away
    # The upstream may bill the whole answer of a call the gateway cancelled: the call is charged
    # its worst case (prompt: one token per request byte; completion: the cap it was sent with).
    upstream.script("up-small", Reply(delay_s=3))
    body = {"model": "cascade", "messages": MESSAGES, "max_tokens": 1000}
    post_and_leave(gateway.url + "/v1/chat/completions", body, lambda: bool(upstream.calls("up-small")))
    assert upstream.wait_for(lambda: "up-small" in upstream.cancelled, timeout_s=3)
    completion_usd = 1000 * 0.2 / 1e6  # small: output_per_mtok 0.2
    assert upstream.wait_for(
        lambda: gateway.sample("cascade_cost_usd_total", tier="balanced", model="small") > completion_usd
    )
    assert gateway.sample("cascade_tokens_total", model="small", kind="completion") == 1000


def _chat_stream(gateway: RunningGateway) -> AbstractContextManager[httpx.Response]:
    """A streamed chat request to the served gateway over its socket, read as the caller goes."""
    return httpx.stream(
        "POST",
        gateway.url + "/v1/chat/completions",
        timeout=10,
        json={"model": "cascade", "messages": MESSAGES, "stream": True},
    )


def test_client_disconnect_mid_stream_cancels_the_upstream_stream(disconnect_gateway, upstream) -> None:
    gateway = disconnect_gateway  # a real socket: the client goes away
    upstream.script("up-small", ok(confidence=0.3))
    upstream.script("up-large", ok(" ".join(["tok"] * 50), chunk_delay_s=0.1))
    with _chat_stream(gateway) as response:
        seen = 0
        for line in response.iter_lines():
            if line.startswith("data:"):
                seen += 1
            if seen >= 3:
                break
    assert upstream.wait_for(lambda: "up-large" in upstream.cancelled, timeout_s=5)
    assert "up-large" not in upstream.completed


def _in_flight(gateway) -> tuple[int, int]:
    """(tasks on the gateway's loop, upstream connections checked out of the pools) right now."""

    async def count() -> tuple[int, int]:
        # aiohttp has no public counter of checked-out connections; _acquired is that set.
        acquired = sum(len(c.session.connector._acquired) for c in gateway.gateway.pool.clients.values())
        return len(asyncio.all_tasks()), acquired

    return asyncio.run_coroutine_threadsafe(count(), gateway.gateway.loop).result(5)


def test_disconnects_leave_no_tasks_or_connections_behind(disconnect_gateway, upstream) -> None:
    gateway = disconnect_gateway  # a real socket: the client goes away
    gateway.client().chat.completions.create(model="cascade", messages=MESSAGES)  # warm the pools
    baseline_tasks, _ = _in_flight(gateway)
    upstream.script("up-small", Reply(delay_s=3), Reply(delay_s=3))
    upstream.script("up-large", ok(" ".join(["tok"] * 50), chunk_delay_s=0.1))
    called = len(upstream.calls("up-small"))
    for sent in range(called + 1, called + 3):
        body = {"model": "cascade", "messages": MESSAGES}
        post_and_leave(
            gateway.url + "/v1/chat/completions", body, lambda n=sent: len(upstream.calls("up-small")) == n
        )
    upstream.script("up-small", ok(confidence=0.3))
    with _chat_stream(gateway) as response:
        next(response.iter_lines())
    assert upstream.wait_for(lambda: len(upstream.cancelled) == 3, timeout_s=5)
    assert upstream.wait_for(lambda: _in_flight(gateway) == (baseline_tasks, 0), timeout_s=5), _in_flight(
        gateway
    )
