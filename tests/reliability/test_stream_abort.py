"""Abandoned live streams are charged: client disconnects and upstream cuts, against real processes.

`cascade serve` runs as a subprocess with a client key whose spend limit admits one full stream,
in front of the scripted upstream, with the spend counters in the real Redis. The true spend is
what the scripted upstream produced (prompt + the tokens it wrote before the stream stopped),
priced with the configured prices.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from stream_support import (
    MESSAGES,
    PRICES,
    gateway_process,
    price_usd,
    prompt_bound_excess_usd,
    true_spend_usd,
    unproduced_usd,
    write_config,
)

from tests.support.money import worst_case_usd
from tests.support.scripted_upstream import ok, running_upstream

TOKENS = 40
SMALL_USAGE = (10, 5)
LARGE_PROMPT = 12
CAP = 64  # the request's max_tokens: the completion part of its worst case


def _long_answer() -> str:
    return " ".join(f"w{i}" for i in range(TOKENS))


@pytest.mark.parametrize(
    ("model", "route"),
    [("cascade", ["small", "large"]), ("large", ["large"])],
    ids=["escalated", "passthrough"],
)
def test_aborted_streams_are_charged_and_refused_once_the_limit_is_reached(
    tmp_path: Path, model: str, route: list[str]
) -> None:
    body = {"model": model, "messages": MESSAGES, "stream": True, "max_tokens": CAP}
    worst = worst_case_usd(body, route, PRICES, CAP)
    limit = 1.5 * worst  # admits one full stream, not two
    with running_upstream() as upstream:
        upstream.set_default("up-small", ok("unsure", confidence=0.3, usage=SMALL_USAGE))
        upstream.set_default("up-large", ok(_long_answer(), usage=(LARGE_PROMPT, TOKENS), chunk_delay_s=0.05))
        with gateway_process(write_config(tmp_path, upstream.base_url, limit_usd=limit)) as gateway:
            statuses = []
            for _ in range(6):
                read = gateway.stream(body, stop_after=TOKENS - 10)  # the client leaves mid-answer
                statuses.append(read.status)
                gateway.wait_for_requests(len(statuses))
            logged = gateway.wait_for_requests(6)
            counted = gateway.spend_usd()
        small_calls = len(upstream.calls("up-small"))
        true = true_spend_usd(upstream, small_calls, SMALL_USAGE)
        streams = list(upstream.streams)
        upstream_after = upstream

    admitted = statuses.count(200)
    assert statuses[0] == 200 and 429 in statuses, statuses
    assert statuses == [200] * admitted + [429] * (6 - admitted), "refused for good once the limit is reached"
    assert all(not s.finished and 0 < s.completion_tokens < TOKENS for s in streams), streams
    # Money: never short of the true spend, never past the limit by more than one worst case, and
    # within one worst case of the truth.
    assert counted >= true - 1e-9, (counted, true)
    assert counted <= limit + worst
    assert abs(counted - true) <= worst, (counted, true, worst)
    # The counter holds exactly what the requests were charged (their log lines' cost_usd).
    assert counted == pytest.approx(sum(line.get("cost_usd", 0.0) for line in logged), abs=1e-8)
    charged = [line for line in logged if line["status"] == 499]
    assert len(charged) == admitted and all(line["cost_usd"] > 0 for line in charged)
    # The live stage broke off without a usage: charged its worst case, the prompt at its bound
    # (one token per byte of the upstream request) and the cap sent, so above the truth by the
    # prompt bound's excess and the tokens the stream did not write.
    excess = prompt_bound_excess_usd(upstream_after, "large", LARGE_PROMPT)
    unproduced = unproduced_usd(upstream_after, "large", CAP)
    assert counted == pytest.approx(true + excess + unproduced, abs=1e-8)


def test_a_stream_cut_by_the_upstream_is_charged_its_worst_case(tmp_path: Path) -> None:
    body = {"model": "cascade", "messages": MESSAGES, "stream": True, "max_tokens": CAP}
    worst = worst_case_usd(body, ["small", "large"], PRICES, CAP)
    with running_upstream() as upstream:
        upstream.script("up-small", ok("unsure", confidence=0.3, usage=SMALL_USAGE))
        upstream.script("up-large", ok(_long_answer(), usage=(LARGE_PROMPT, TOKENS), break_stream_after=25))
        with gateway_process(write_config(tmp_path, upstream.base_url, limit_usd=10 * worst)) as gateway:
            read = gateway.stream(body)
            (logged,) = gateway.wait_for_requests(1)
            counted = gateway.spend_usd()
        true = true_spend_usd(upstream, 1, SMALL_USAGE)
        excess = prompt_bound_excess_usd(upstream, "large", LARGE_PROMPT)
        unproduced = unproduced_usd(upstream, "large", CAP)
        (record,) = upstream.streams

    assert read.status == 200 and not read.done
    assert read.errors and read.errors[0]["error"]["type"] == "upstream_error"
    assert record.completion_tokens == 24  # 25 chunks written: the role chunk and 24 tokens
    assert logged["outcome"] == "error" and logged["cost_usd"] == pytest.approx(counted, abs=1e-8)
    # Charged: the cheap call plus the large stage's worst case (its prompt bound and the cap sent):
    # what the upstream produced past the 24 tokens it relayed is unknown.
    assert counted == pytest.approx(true + excess + unproduced, abs=1e-8)
    assert counted > price_usd("small", *SMALL_USAGE) + price_usd("large", 0, CAP) - 1e-9
