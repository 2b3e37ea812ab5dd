"""Black-box scorers through a real `cascade serve` process with its spend in a private Redis: a
request through a ``verifier`` route and through a ``consistency`` route is charged every call it
made (the stage, the scorer's extra calls, the escalation), so the response header, the request's
log line, ``cascade_cost_usd_total`` and the key's Redis counter all equal what the scripted upstream
billed; a failing verifier call escalates with reason ``scorer_failed``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from processes import RedisServer
from spend_support import MESSAGES, Money, wait_until

from tests.support.gateway_process import GatewayProcess
from tests.support.policy_files import write_policy
from tests.support.scripted_upstream import ScriptedUpstream, error, ok

KEY = "sk-reliability-blackbox"
SCORERS: dict[str, dict[str, Any]] = {
    "verifier": {"name": "verifier", "top_k": 5, "verifier": {"model": "medium"}},
    "consistency": {"name": "consistency", "samples": 3, "temperature": 0.8, "equivalence": "numeric"},
}


@pytest.fixture(params=sorted(SCORERS))
def scorer(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def policy_path(tmp_path: Path, scorer: str) -> Path:
    """The test policy (small -> large on tier ``balanced``, threshold 0.5) scored by ``scorer``."""
    return write_policy(tmp_path / f"{scorer}.json", scorer=SCORERS[scorer])


@pytest.fixture
def replica(start_replicas, redis_server: RedisServer) -> GatewayProcess:
    (one,) = start_replicas(
        1, redis=redis_server, env={"CASCADE_API_KEYS": KEY}, budgets={"limit_usd": 1.0}, redis_timeout_s=1.0
    )
    return one


def request_lines(replica: GatewayProcess) -> list[dict[str, Any]]:
    lines = [line for line in replica.log_text().splitlines() if line.startswith("{")]
    return [parsed for parsed in map(json.loads, lines) if parsed.get("event") == "request"]


def script(upstream: ScriptedUpstream, scorer: str, *, accept: bool) -> int:
    """Script one request through ``scorer``'s route (accepted at small, or escalated to large);
    the number of upstream calls it makes."""
    upstream.script("up-small", ok("42", confidence=None, usage=(17, 2)))
    if scorer == "verifier":
        upstream.script("up-medium", ok("yes" if accept else "no", confidence=0.9, usage=(70, 1)))
        extra = 1
    else:
        samples = ["42", "The answer is 42", "41"] if accept else ["41", "40", "42"]
        upstream.script("up-small", *(ok(text, confidence=None, usage=(17, 3)) for text in samples))
        extra = 3
    upstream.script("up-large", ok("6 * 7 = 42", usage=(25, 8)))
    return 1 + extra + (0 if accept else 1)


def test_a_black_box_route_is_charged_every_call_it_made(
    replica: GatewayProcess, upstream: ScriptedUpstream, redis_server: RedisServer, scorer: str
) -> None:
    money = Money(upstream, redis_server, KEY)
    client = replica.client(KEY)
    headers: list[float] = []
    calls = 0
    for accept in (True, False):
        calls += script(upstream, scorer, accept=accept)
        raw = client.chat.completions.with_raw_response.create(
            model="cascade", messages=MESSAGES, max_tokens=16
        )
        assert raw.headers["x-cascade-escalated"] == ("false" if accept else "true")
        headers.append(float(raw.headers["x-cascade-cost-usd"]))

    assert len(upstream.requests) == len(upstream.produced) == calls
    assert not any("logprobs" in c.body for c in upstream.calls("up-small"))  # the scored model is asked none
    billed = money.true_usd()
    assert sum(headers) == pytest.approx(billed, rel=1e-9)
    assert wait_until(lambda: len(request_lines(replica)) == 2)
    assert sum(line["cost_usd"] for line in request_lines(replica)) == pytest.approx(billed, rel=1e-9)
    assert all(line["worst_case_usd"] >= line["cost_usd"] for line in request_lines(replica))
    metrics = replica.metrics()["cascade_cost_usd"]
    assert sum(s.value for s in metrics.samples if s.name.endswith("_total")) == pytest.approx(
        billed, rel=1e-9
    )
    assert wait_until(lambda: money.counter_usd() == pytest.approx(billed, rel=1e-6))
    assert money.pending_reservations() == 0


@pytest.mark.parametrize("scorer", ["verifier"], indirect=True)
def test_a_failing_verifier_call_escalates_with_reason_scorer_failed(
    replica: GatewayProcess, upstream: ScriptedUpstream, redis_server: RedisServer
) -> None:
    upstream.script("up-small", ok("42", confidence=None, usage=(17, 2)))
    upstream.set_default("up-medium", error(500))
    upstream.script("up-large", ok("6 * 7 = 42", usage=(25, 8)))
    raw = replica.client(KEY).chat.completions.with_raw_response.create(
        model="cascade", messages=MESSAGES, max_tokens=16
    )
    assert raw.headers["x-cascade-models-called"] == "small,medium,large"  # the verifier was called
    assert len(upstream.calls("up-medium")) == 2  # the call and its one retry, neither billed
    assert wait_until(lambda: len(request_lines(replica)) == 1)
    (line,) = request_lines(replica)
    assert line["escalation_reasons"] == ["scorer_failed"]
    billed = Money(upstream, redis_server, KEY).true_usd()
    assert float(raw.headers["x-cascade-cost-usd"]) == pytest.approx(billed, rel=1e-9)
