"""The transport seam (gateway/upstream/transport.py): an upstream reached in memory
(gateway/upstream/in_process.py) answers, fails and is charged exactly as over loopback.

Each case runs one ``UpstreamClient`` call against the scripted upstream twice, through the pooled
TCP session and through the in-process one, and asserts the same outcome: the answer or the
failure's kind, the attempts charged, what the upstream recorded (a cut stream, a cancelled call).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

from gateway.config.settings import ModelConfig
from gateway.streaming.sse import upstream_events
from gateway.telemetry.metrics import GatewayMetrics
from gateway.upstream.client import UpstreamClient
from gateway.upstream.failure import UpstreamFailure
from gateway.upstream.in_process import InProcessUpstreams
from gateway.upstream.transport import open_pooled_session
from redaction import Redactor
from tests.support.scripted_upstream import Reply, ScriptedUpstream, error, ok

BODY = {"model": "up-small", "messages": [{"role": "user", "content": "Capital of France?"}]}
TRANSPORTS = ["loopback", "in_process"]


def model(base_url: str, max_retries: int = 1) -> ModelConfig:
    """Model ``up-small`` at ``base_url``: 0.5 s per read, ``max_retries`` retries."""
    return ModelConfig(
        base_url=base_url,
        model="up-small",
        timeout_s=0.5,
        max_retries=max_retries,
        retry={"base_s": 0.001},  # the default 0.5 s backoff base would only slow the test
        price={"per_query_usd": 0.001},
    )


def client_of(upstream: ScriptedUpstream, transport: str) -> UpstreamClient:
    """A client of model ``up-small`` sending through ``transport``."""
    config = model(upstream.base_url)
    opener = (
        open_pooled_session
        if transport == "loopback"
        else InProcessUpstreams({upstream.base_url: upstream.application})
    )
    return UpstreamClient("small", config, GatewayMetrics(), Redactor([]), opener)


async def complete(client: UpstreamClient) -> tuple[Any, list[bool]]:
    """(the answer's content or the failure's kind, each attempt's ``billable``)."""
    attempts: list[Any] = []
    await client.start()
    try:
        reply = await client.complete("chat", orjson.dumps(BODY), time.monotonic() + 5, attempts)
        outcome: Any = reply.body["choices"][0]["message"]["content"]
    except UpstreamFailure as failure:
        outcome = failure.kind
    finally:
        await client.close()
    return outcome, [a.billable for a in attempts]


async def stream(client: UpstreamClient, read: int | None = None) -> tuple[Any, list[bool]]:
    """(the streamed text or the failure's kind, the billable flags of the attempts before the 200);
    with ``read``, the stream is closed after that many events."""
    attempts: list[Any] = []
    body = orjson.dumps({**BODY, "stream": True})
    texts: list[str] = []
    await client.start()
    try:
        async with client.stream("chat", body, time.monotonic() + 5, attempts) as response:
            async for event in upstream_events(response, "small"):
                texts += [c["delta"].get("content") or "" for c in event["choices"]]
                if read is not None and len(texts) >= read:
                    response.close()
                    break
        outcome: Any = "".join(texts)
    except UpstreamFailure as failure:
        outcome = failure.kind
    finally:
        await client.close()
    return outcome, [a.billable for a in attempts]


COMPLETE_CASES = {
    "answer": ([ok("Paris.")], ("Paris.", [True])),
    "5xx then answer": ([error(503), ok("Paris.")], ("Paris.", [False, True])),
    "rejected": ([error(400)], ("rejected", [False])),
    "cut body": ([Reply(cut_body_at=20)], ("connect", [True])),
    "stall mid-body": ([Reply(stall_body_s=2)], ("timeout", [True])),
    "dropped connection": ([Reply(drop_connection=True)], ("connect", [True])),
    "slow answer": ([Reply(delay_s=2)], ("timeout", [True])),
    "garbage": ([Reply(raw=b"{not json")], ("malformed", [True])),
}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("case", list(COMPLETE_CASES))
def test_a_non_streamed_call_ends_the_same_either_way(
    upstream: ScriptedUpstream, case: str, transport: str
) -> None:
    replies, expected = COMPLETE_CASES[case]
    upstream.script("up-small", *replies)
    assert asyncio.run(complete(client_of(upstream, transport))) == expected


STREAM_CASES = {
    "chunks": ([ok("one two three")], ("one two three", [])),
    "429 then chunks": ([error(429), ok("one two")], ("one two", [False])),
    "cut after three chunks": ([ok("one two three four", break_stream_after=3)], ("connect", [])),
    "stall mid-stream": ([Reply(content="one two three", stall_body_s=2)], ("timeout", [])),
    "not json": ([Reply(garbage=True)], ("malformed", [])),
}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("case", list(STREAM_CASES))
def test_a_stream_ends_the_same_either_way(upstream: ScriptedUpstream, case: str, transport: str) -> None:
    replies, expected = STREAM_CASES[case]
    upstream.script("up-small", *replies)
    assert asyncio.run(stream(client_of(upstream, transport))) == expected


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_stream_closed_by_its_reader_cancels_the_upstream_handler(
    upstream: ScriptedUpstream, transport: str
) -> None:
    upstream.script("up-small", ok(" ".join(["tok"] * 50), chunk_delay_s=0.05))
    outcome, _ = asyncio.run(stream(client_of(upstream, transport), read=4))  # the role chunk, 3 tokens
    assert outcome == "tok tok tok"
    assert upstream.wait_for(lambda: upstream.cancelled == ["up-small"])
    assert upstream.streams[0].finished is False


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_closed_port_is_a_connection_never_made(upstream: ScriptedUpstream, transport: str) -> None:
    from tests.support.ports import free_port

    config = model(f"http://127.0.0.1:{free_port()}/v1", max_retries=0)
    opener = (
        open_pooled_session
        if transport == "loopback"
        else InProcessUpstreams({upstream.base_url: upstream.application})
    )
    client = UpstreamClient("small", config, GatewayMetrics(), Redactor([]), opener)
    assert asyncio.run(complete(client)) == ("connect", [False])
