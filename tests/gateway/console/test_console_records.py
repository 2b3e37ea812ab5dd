"""Each request's decision record (gateway.records), written by the real gateway in-process against the
scripted upstream and the real Redis: what it holds for an escalated, an accepted, a retried and a
refused request, bodies only on opt-in and redacted, nothing at all with the console off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from gateway.config.settings import Settings
from tests.support.gateway_testkit import ADMIN_KEY, model_configs, until
from tests.support.in_process_gateway import InProcessGateway
from tests.support.scripted_upstream import ScriptedUpstream, error, ok

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def recorded(gateway: InProcessGateway, request_id: str) -> dict[str, Any]:
    """The record of ``request_id``, once written (the write is queued after the response)."""
    found: list[dict[str, Any]] = []

    def written() -> bool:
        record = gateway.app_loop.call(gateway.gateway.console.store.get(request_id))
        if record is not None:
            found.append(record)
        return record is not None

    assert until(written, 10), f"no record of {request_id}"
    return found[0]


def test_an_escalated_request_records_each_stage_its_score_and_the_charge(
    console_gateway: InProcessGateway, upstream: ScriptedUpstream
) -> None:
    upstream.script("up-small", ok(confidence=0.3))
    reply = console_gateway.client().chat.completions.with_raw_response.create(
        model="cascade", messages=QUESTION
    )
    record = recorded(console_gateway, reply.headers["x-request-id"])
    assert (record["api"], record["tier"], record["outcome"], record["reason"]) == (
        "chat",
        "balanced",
        "escalated",
        "low_score",
    )
    assert record["mechanism"] == "cascade" and record["route"] == ["small", "large"]
    first, second = record["stages"]
    assert (first["stage"], first["model"], first["decision"], first["reason"]) == (
        0,
        "small",
        "escalated",
        "low_score",
    )
    assert first["threshold"] == 0.5 and first["score"] < 0.5
    assert f"{first['score']:.6g}" == reply.headers["x-cascade-score"]
    assert (second["stage"], second["model"], second["decision"], second["score"]) == (
        1,
        "large",
        "answered",
        None,
    )
    assert (first["prompt_tokens"], first["completion_tokens"]) == (10, 5)  # the scripted usage
    assert first["first_token_ms"] is None and second["first_token_ms"] is None  # read whole
    # The charge is the headers' and the stages' sum; no part of it is a bound (usage was read).
    charge = record["charge"]
    assert f"{charge['cost_usd']:.10g}" == reply.headers["x-cascade-cost-usd"]
    assert charge["cost_usd"] == pytest.approx(first["cost_usd"] + second["cost_usd"])
    assert charge["bound_usd"] == 0 and charge["reserved_usd"] >= charge["cost_usd"]
    sent = dict(record["headers"])
    assert sent["x-request-id"] == reply.headers["x-request-id"]
    assert sent["x-cascade-models-called"] == "small,large"
    assert "request_body" not in record and "answer_body" not in record  # not opted in


def test_a_streamed_escalated_request_records_each_stages_time_to_first_token(
    start_gateway: Callable[..., InProcessGateway],
    console_settings: Callable[..., Settings],
    upstream: ScriptedUpstream,
) -> None:
    # A first-token deadline has both stages requested streamed: the cheap one read whole and
    # scored, the last one relayed live; each call's first chunk is noted.
    models = model_configs(upstream.base_url)
    for name in ("small", "large"):
        models[name]["first_token_timeout_s"] = 1.5  # below their timeout_s
    gateway = start_gateway(console_settings(models=models))
    upstream.script("up-small", ok(confidence=0.3))
    with gateway.client().chat.completions.with_streaming_response.create(
        model="cascade", messages=QUESTION, stream=True
    ) as reply:
        request_id = reply.headers["x-request-id"]
        assert "up-large" in "".join(c.choices[0].delta.content or "" for c in reply.parse() if c.choices)
    first, second = recorded(gateway, request_id)["stages"]
    assert (first["decision"], second["decision"]) == ("escalated", "answered")
    assert [c.body["stream"] for c in (*upstream.calls("up-small"), *upstream.calls("up-large"))] == [
        True,
        True,
    ]
    # From the call's start: within its latency (which runs from the request's start for the first).
    assert 0 < first["first_token_ms"] <= first["latency_ms"]
    assert second["first_token_ms"] > 0


def test_an_accepted_request_records_one_stage_accepted(
    console_gateway: InProcessGateway, upstream: ScriptedUpstream
) -> None:
    upstream.script("up-small", ok(confidence=0.99))
    reply = console_gateway.client().chat.completions.with_raw_response.create(
        model="cascade", messages=QUESTION
    )
    record = recorded(console_gateway, reply.headers["x-request-id"])
    (stage,) = record["stages"]
    assert (record["outcome"], record["reason"], stage["decision"]) == ("accepted", "none", "accepted")
    assert stage["score"] >= stage["threshold"]


def test_retries_and_a_failed_request_are_recorded_with_the_error(
    console_gateway: InProcessGateway, upstream: ScriptedUpstream
) -> None:
    upstream.script("up-large", error(503), error(503))
    with pytest.raises(openai.APIStatusError) as failed:
        console_gateway.client().chat.completions.create(
            model="cascade", messages=QUESTION, extra_headers={"x-cascade-tier": "direct"}
        )
    record = recorded(console_gateway, failed.value.response.headers["x-request-id"])
    assert (record["status"], record["outcome"], record["reason"]) == (502, "error", "upstream_failed")
    assert record["error"]["code"] == "upstream_failed"
    (stage,) = record["stages"]
    # Two attempts (one retry), neither billable: an error status is assumed unbilled ($0).
    assert (stage["attempts"], stage["retries"], stage["billed_attempts"], stage["cost_usd"]) == (2, 1, 0, 0)
    assert record["failures"] == ["http"] and (stage["decision"], stage["reason"]) == ("failed", "http")


def test_a_refused_request_is_recorded_without_stages(
    start_gateway: Callable[..., InProcessGateway],
    console_settings: Callable[..., Settings],
    monkeypatch: Any,
) -> None:
    monkeypatch.setenv("CASCADE_API_KEYS", "sk-client")
    gateway = start_gateway(console_settings(auth={"open": False}))
    answer = gateway.http.post("/v1/chat/completions", json={"model": "cascade", "messages": QUESTION})
    assert answer.status_code == 401
    record = recorded(gateway, answer.headers["x-request-id"])
    assert (record["status"], record["reason"], record["key_id"]) == (401, "missing_api_key", None)
    assert "stages" not in record
    served = gateway.client(api_key="sk-client").chat.completions.with_raw_response.create(
        model="cascade", messages=QUESTION
    )
    assert recorded(gateway, served.headers["x-request-id"])["key_id"] == _key_id("sk-client")


def test_bodies_are_recorded_only_when_opted_in_and_redacted(
    start_gateway: Callable[..., InProcessGateway],
    console_settings: Callable[..., Settings],
    upstream: ScriptedUpstream,
) -> None:
    gateway = start_gateway(console_settings(console={"record_bodies": True, "body_chars": 300}))
    upstream.script("up-small", ok(content="The answer is Paris.", confidence=0.99))
    secret = [
        {"role": "user", "content": f"my admin key is {ADMIN_KEY}, and Bearer abcdefghijkl " + "x" * 400}
    ]
    reply = gateway.client().chat.completions.with_raw_response.create(model="cascade", messages=secret)
    record = recorded(gateway, reply.headers["x-request-id"])
    assert ADMIN_KEY not in record["request_body"] and "abcdefghijkl" not in record["request_body"]
    assert "my admin key is ***" in record["request_body"]
    assert record["request_body"].endswith("more characters not kept]")
    assert "The answer is Paris." in record["answer_body"]


def test_without_redis_the_records_are_kept_in_the_process(
    start_gateway: Callable[..., InProcessGateway],
    console_settings: Callable[..., Settings],
    upstream: ScriptedUpstream,
) -> None:
    gateway = start_gateway(console_settings(redis_url=None))
    assert gateway.gateway.console.store.kind == "memory"
    reply = gateway.client().chat.completions.with_raw_response.create(model="cascade", messages=QUESTION)
    assert recorded(gateway, reply.headers["x-request-id"])["outcome"] == "accepted"
    page = gateway.http.get("/console/requests", headers={"authorization": f"Bearer {ADMIN_KEY}"})
    assert reply.headers["x-request-id"] in page.text and "this replica&#39;s own, in memory" in page.text


def test_with_the_console_off_nothing_is_recorded_or_served(gateway: InProcessGateway) -> None:
    assert gateway.gateway.console is None
    reply = gateway.client().chat.completions.with_raw_response.create(model="cascade", messages=QUESTION)
    assert reply.headers["x-cascade-model"] == "small"
    assert (
        gateway.http.get("/console/requests", headers={"authorization": f"Bearer {ADMIN_KEY}"}).status_code
        == 404
    )


def _key_id(key: str) -> str:
    from gateway.keys.auth import hash_key, key_id_of

    return key_id_of(hash_key(key))


def test_the_pages_say_so_when_the_records_cannot_be_read(
    start_gateway: Callable[..., InProcessGateway], console_settings: Callable[..., Settings]
) -> None:
    gateway = start_gateway(console_settings(redis_url="redis://127.0.0.1:1/0"))  # nothing listens there
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    for path in ("/console/requests", "/console/requests/0123456789abcdef01234567"):
        answer = gateway.http.get(path, headers=admin)
        assert answer.status_code == 503 and "The request records cannot be read right now" in answer.text
