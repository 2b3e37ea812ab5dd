"""A live stream that outlasts the request deadline, against a real `cascade serve` process.

It must end with an SSE error of code ``upstream_timeout`` (not an internal error), log no
traceback, be counted as an upstream timeout, keep the streamed time out of the gateway overhead,
and be charged for what it streamed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from stream_support import (
    MESSAGES,
    PRICES,
    gateway_process,
    prompt_bound_excess_usd,
    true_spend_usd,
    unproduced_usd,
    write_config,
)

from tests.support.money import worst_case_usd
from tests.support.scripted_upstream import ok, running_upstream

DEADLINE_S = 1.5
SMALL_USAGE = (10, 5)


def test_a_stream_past_the_deadline_ends_with_upstream_timeout(tmp_path: Path) -> None:
    body = {"model": "cascade", "messages": MESSAGES, "stream": True, "max_tokens": 64}
    answer = " ".join(f"w{i}" for i in range(40))  # 40 chunks, 0.1 s apart: 4 s > the deadline
    with running_upstream() as upstream:
        upstream.script("up-small", ok("unsure", confidence=0.3, usage=SMALL_USAGE))
        upstream.script("up-large", ok(answer, usage=(12, 40), chunk_delay_s=0.1))
        config = write_config(
            tmp_path,
            upstream.base_url,
            limit_usd=10 * worst_case_usd(body, ["small", "large"], PRICES, 64),
            request_timeout_s=DEADLINE_S,
        )
        with gateway_process(config) as gateway:
            read = gateway.stream(body)
            (line,) = gateway.wait_for_requests(1)
            logs = gateway.logs()
            timeouts = gateway.sample("cascade_upstream_requests_total", model="large", status="timeout")
            overhead_sum = gateway.sample("cascade_overhead_seconds_sum", endpoint="chat")
            errors = gateway.sample(
                "cascade_requests_total", tier="balanced", outcome="error", endpoint="chat"
            )
            counted = gateway.spend_usd()
        (record,) = upstream.streams
        true = true_spend_usd(upstream, 1, SMALL_USAGE)
        excess = prompt_bound_excess_usd(upstream, "large", 12)
        unproduced = unproduced_usd(upstream, "large", 64)

    assert read.status == 200 and not read.done
    assert 5 <= len(read.events) < 40  # part of the answer arrived before the deadline
    assert [e["error"]["code"] for e in read.errors] == ["upstream_timeout"]
    assert read.errors[0]["error"]["type"] == "upstream_error"
    assert not any("traceback" in entry for entry in logs)
    assert line["upstream_failures"] == ["timeout"] and line["outcome"] == "error"
    assert line["status"] == 504
    assert timeouts == 1 and errors == 1
    # The streamed seconds are upstream time, not gateway overhead.
    assert line["upstream_ms"] >= DEADLINE_S * 1000 * 0.9
    assert line["overhead_ms"] < 500 and overhead_sum < 0.5  # the stream itself took over 1,500 ms
    assert float(read.headers["x-cascade-overhead-ms"]) < 500
    # Broken off without a usage: charged its worst case, whatever was streamed before the deadline.
    assert not record.finished and 0 < record.completion_tokens < 40
    assert counted == pytest.approx(true + excess + unproduced, abs=1e-8)  # +-2 tokens in flight
