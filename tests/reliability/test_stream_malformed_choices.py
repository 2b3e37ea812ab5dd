"""A final stage answering ``choices: []`` or non-object choices is a malformed upstream answer.

Streamed or not, the client never gets it as a 200: the cheap answer marked degraded when the
policy allows it, else a 502 OpenAI error. Against real `cascade serve` processes (one with
``allow_degraded: true``, one with ``false``) in front of the scripted upstream.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from stream_support import MESSAGES, StreamGateway, gateway_process, write_config

from tests.support.scripted_upstream import Reply, ScriptedUpstream, ok, running_upstream

BASE = {"id": "cmpl-bad", "object": "chat.completion", "created": 1, "model": "up-large"}
CHUNK = {"id": "chunk-bad", "object": "chat.completion.chunk", "created": 1, "model": "up-large"}
USAGE = {"prompt_tokens": 12, "completion_tokens": 0, "total_tokens": 12}

MALFORMED: dict[str, Reply] = {
    "json-empty-choices": Reply(body={**BASE, "choices": [], "usage": USAGE}),
    "json-non-object-choices": Reply(body={**BASE, "choices": [1, "two"], "usage": USAGE}),
    "stream-empty-choices": Reply(
        stream_events=[{**CHUNK, "choices": []}, {**CHUNK, "choices": [], "usage": USAGE}]
    ),
    "stream-non-object-choices": Reply(stream_events=[{**CHUNK, "choices": ["x"]}]),
}

# A JSON answer is malformed for a plain request and for a streamed one (an upstream that ignores
# ``stream``); a malformed SSE stream only answers a streamed request.
CASES = [
    pytest.param(case, stream, id=f"{case}-{'sse' if stream else 'request'}")
    for case in sorted(MALFORMED)
    for stream in (False, True)
    if stream or case.startswith("json")
]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The upstream and two gateways: ``degraded`` (allowed) and ``strict`` (not allowed)."""
    directory = tmp_path_factory.mktemp("malformed")
    with running_upstream() as upstream:
        degraded = write_config(directory, upstream.base_url, allow_degraded=True)
        strict = write_config(directory, upstream.base_url, allow_degraded=False)
        with gateway_process(degraded) as lenient_gateway, gateway_process(strict) as strict_gateway:
            yield {"upstream": upstream, "degraded": lenient_gateway, "strict": strict_gateway}


@pytest.fixture
def upstream(servers: dict[str, Any]) -> ScriptedUpstream:
    server: ScriptedUpstream = servers["upstream"]
    server.reset()
    return server


def _body(model: str, stream: bool) -> dict[str, Any]:
    return {"model": model, "messages": MESSAGES, "stream": stream}


@pytest.mark.parametrize(("case", "stream"), CASES)
def test_malformed_final_answer_falls_back_to_the_degraded_cheap_answer(
    servers: dict[str, Any], upstream: ScriptedUpstream, case: str, stream: bool
) -> None:
    gateway: StreamGateway = servers["degraded"]
    upstream.script("up-small", ok("cheap guess", confidence=0.3))
    upstream.script("up-large", MALFORMED[case])
    if stream:
        read = gateway.stream(_body("cascade", True))
        assert read.status == 200 and read.done and not read.errors
        assert read.headers["x-cascade-degraded"] == "true"
        assert read.text == "cheap guess"
        assert read.events[-1]["cascade"]["degraded"] is True
    else:
        response = gateway.post(_body("cascade", False))
        assert response.status_code == 200, response.text
        assert response.headers["x-cascade-degraded"] == "true"
        assert response.json()["choices"][0]["message"]["content"] == "cheap guess"
    assert len(upstream.calls("up-large")) == 1


@pytest.mark.parametrize(("case", "stream"), CASES)
@pytest.mark.parametrize("model", ["cascade", "large"], ids=["no-degraded", "passthrough"])
def test_malformed_final_answer_is_a_502_when_nothing_else_can_answer(
    servers: dict[str, Any], upstream: ScriptedUpstream, case: str, stream: bool, model: str
) -> None:
    gateway: StreamGateway = servers["strict"]
    upstream.script("up-small", ok("cheap guess", confidence=0.3))
    upstream.script("up-large", MALFORMED[case])
    logged = len(gateway.request_logs())
    if stream:
        read = gateway.stream(_body(model, True))
        assert read.status == 502 and not read.events
    else:
        response = gateway.post(_body(model, False))
        assert response.status_code == 502
        error = response.json()["error"]
        assert error["type"] == "upstream_error" and error["code"] == "upstream_failed"
    line = gateway.wait_for_requests(logged + 1)[-1]
    assert line["status"] == 502 and line["upstream_failures"] == ["malformed"]
