"""Graceful shutdown of a real `cascade serve` process with streams in flight.

SIGTERM stops new connections at once; in-flight requests get ``limits.shutdown_grace_s`` to finish;
a stream still open after that ends with an SSE ``error`` event (code ``server_shutting_down``),
is settled for what it streamed (never left holding its full reservation), logged as a JSON line
and counted in ``cascade_shutdown_interrupted_requests_total``.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families
from stream_support import (
    KEY,
    MESSAGES,
    PRICES,
    GatewayProcess,
    ReadStream,
    gateway_process,
    prompt_bound_excess_usd,
    true_spend_usd,
    unproduced_usd,
    write_config,
)

from gateway.api.app import create_app
from gateway.api.server import DrainingServer
from gateway.config.settings import Settings
from gateway.redis.keys import RedisKeys
from tests.support.money import worst_case_usd
from tests.support.ports import free_port
from tests.support.scripted_upstream import ScriptedUpstream, ok, running_upstream

SMALL_USAGE = (10, 5)
CAP = 1000


def _answer(tokens: int) -> str:
    return " ".join(f"w{i}" for i in range(tokens))


def _body() -> dict[str, Any]:
    return {"model": "cascade", "messages": MESSAGES, "stream": True, "max_tokens": CAP}


def _stream_in_background(gateway: GatewayProcess) -> Future[ReadStream]:
    result: Future[ReadStream] = Future()

    def read() -> None:
        try:
            result.set_result(gateway.stream(_body()))
        except BaseException as exc:  # handed to the test thread
            result.set_exception(exc)

    threading.Thread(target=read, daemon=True).start()
    return result


def _wait_for_tokens(upstream: ScriptedUpstream, tokens: int) -> None:
    assert upstream.wait_for(
        lambda: bool(upstream.streams) and upstream.streams[0].completion_tokens >= tokens
    )


def test_a_stream_that_ends_within_the_grace_completes(tmp_path: Path) -> None:
    with running_upstream() as upstream:
        upstream.script("up-small", ok("unsure", confidence=0.3, usage=SMALL_USAGE))
        upstream.script("up-large", ok(_answer(20), usage=(12, 20), chunk_delay_s=0.1))  # about 2 s
        # A grace far longer than any wait below: the process can only exit in time by leaving as
        # soon as the stream is done, not at the end of the grace.
        config = write_config(tmp_path, upstream.base_url, limit_usd=1.0, shutdown_grace_s=600)
        with gateway_process(config) as gateway:
            pending = _stream_in_background(gateway)
            _wait_for_tokens(upstream, 3)
            gateway.terminate()
            # No new connections while draining: the listener closes (the stream is read below).
            assert _wait_until(lambda: not _accepts_connections(gateway.url), 15)
            read = pending.result(timeout=60)
            gateway.wait(60)  # raises TimeoutExpired if it waited for the grace
            logs = gateway.logs()
            counted = gateway.spend_usd()
        true = true_spend_usd(upstream, 1, SMALL_USAGE)

    assert read.status == 200 and read.done and not read.errors
    assert read.text == _answer(20)
    events = [entry["event"] for entry in logs]
    assert "shutdown_drained" in events and "request_interrupted_by_shutdown" not in events
    assert counted == pytest.approx(true, abs=1e-9)  # the usage arrived: charged exactly


def test_a_stream_past_the_grace_ends_with_an_sse_error_and_is_settled(tmp_path: Path) -> None:
    grace = 1.0
    with running_upstream() as upstream:
        upstream.script("up-small", ok("unsure", confidence=0.3, usage=SMALL_USAGE))
        upstream.script("up-large", ok(_answer(100), usage=(12, 100), chunk_delay_s=0.1))  # about 10 s
        worst = worst_case_usd(_body(), ["small", "large"], PRICES, CAP)
        config = write_config(tmp_path, upstream.base_url, limit_usd=3 * worst, shutdown_grace_s=grace)
        with gateway_process(config) as gateway:
            pending = _stream_in_background(gateway)
            _wait_for_tokens(upstream, 3)
            stopped_at = time.monotonic()
            gateway.terminate()
            read = pending.result(timeout=15)
            ended_after = time.monotonic() - stopped_at
            status = gateway.wait(15)
            logs = gateway.logs()
            plain = gateway.plain_lines()
            counted = gateway.spend_usd()
        true = true_spend_usd(upstream, 1, SMALL_USAGE)
        excess = prompt_bound_excess_usd(upstream, "large", 12)
        unproduced = unproduced_usd(upstream, "large", CAP)
        (record,) = upstream.streams

    # The client got the grace's worth of answer, then an OpenAI-shaped SSE error, no [DONE].
    assert read.status == 200 and not read.done
    assert 3 + 3 <= len(read.events) < 100  # the stream went on during the grace
    assert [e["error"]["code"] for e in read.errors] == ["server_shutting_down"]
    assert read.errors[0]["error"]["type"] == "server_error"
    assert grace <= ended_after  # cut at the grace's end, not at the stream's (not finished: below)
    assert status == -signal.SIGTERM  # uvicorn re-raises the SIGTERM it handled, once it is done
    # Logged as JSON lines (and nothing else but the start banner).
    (interrupted,) = [e for e in logs if e["event"] == "request_interrupted_by_shutdown"]
    assert interrupted["streamed"] is True and 0 < interrupted["cost_usd"] < interrupted["reserved_usd"]
    (request,) = [e for e in logs if e["event"] == "request"]
    assert request["status"] == 503 and request["outcome"] == "error"
    assert {"shutdown_draining", "shutdown_grace_over"} <= {e["event"] for e in logs}
    assert all(line.startswith("cascade gateway on") for line in plain), plain  # a banner at most
    # Broken off without a usage: charged its worst case (the cap sent), as the rule says.
    assert not record.finished and record.completion_tokens < 100
    assert counted == pytest.approx(true + excess + unproduced, abs=1e-8)
    assert counted < worst  # settled, not the reservation left standing: the cheap stage by its usage


def test_interrupted_requests_are_counted_in_the_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keys: RedisKeys
) -> None:
    """In process (the metric is read after the server stopped): the drain ends a stream and a
    request still waiting for its cheap answer, and counts both."""
    monkeypatch.setenv("CASCADE_API_KEYS", KEY)
    monkeypatch.setenv("CASCADE_REDIS_PREFIX", keys.prefix)
    with running_upstream() as upstream:
        upstream.script("up-small", ok("unsure", confidence=0.3, usage=SMALL_USAGE), ok(delay_s=5))
        upstream.script("up-large", ok(_answer(100), usage=(12, 100), chunk_delay_s=0.1))
        settings = Settings.from_yaml(write_config(tmp_path, upstream.base_url, shutdown_grace_s=0.5))
        app = create_app(settings)
        port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=port, loop="uvloop", log_level="warning")
        server = DrainingServer(config, app.state.gateway)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        assert _wait_until(lambda: server.started)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        headers = {"authorization": f"Bearer {KEY}"}

        async def clients() -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=15, headers=headers) as client:
                streamed = asyncio.create_task(client.post(url, json=_body()))
                await asyncio.sleep(0.5)
                waiting = asyncio.create_task(
                    client.post(url, json={"model": "cascade", "messages": MESSAGES})
                )
                await asyncio.sleep(0.5)
                server.should_exit = True  # what SIGTERM does
                return list(await asyncio.gather(streamed, waiting))

        streamed, waiting = asyncio.run(clients())
        thread.join(15)

    assert streamed.status_code == 200 and "server_shutting_down" in streamed.text
    assert waiting.status_code == 503 and waiting.json()["error"]["code"] == "server_shutting_down"
    families = {
        f.name: f for f in text_string_to_metric_families(app.state.gateway.metrics.render().decode())
    }
    (sample,) = families["cascade_shutdown_interrupted_requests"].samples[:1]
    assert sample.name == "cascade_shutdown_interrupted_requests_total" and sample.value == 2


def _wait_until(predicate: Any, timeout_s: float = 15) -> bool:
    end = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < end:
        time.sleep(0.02)
    return bool(predicate())


def _accepts_connections(url: str) -> bool:
    try:
        httpx.get(url + "/healthz", timeout=1)
    except httpx.TransportError:
        return False
    return True
