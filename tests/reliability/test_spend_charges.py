"""What a request reserves and is charged, through real replicas sharing a private Redis, against
an upstream that bills like an OpenAI-compatible server (or lies about its usage):

* a legacy completion whose ``prompt`` is a list (of strings or token arrays) is one completion per
  prompt: its reservation covers every one, so a burst cannot spend past the key's limit;
* an absurd reported usage (10^15 completion tokens) is settled in Redis exactly (or, past what
  a Redis integer holds, at that maximum with a logged error), never dropped to in-process counting;
* usage counts sent as strings are no counts, on a stream as on a whole answer: both charge the
  prompt at its bound, never $0.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from processes import NANO_PER_USD, PRICES, RedisServer
from spend_support import MESSAGES, Money, burst, limited_replicas, send, settled, wait_until

from tests.support.gateway_process import GatewayProcess
from tests.support.scripted_upstream import Reply, ScriptedUpstream, ok

KEY = "sk-reliability-charges"
LIMIT_USD = 1.0
# The largest amount a Redis integer holds, in nano-USD (about $9.2 billion).
REDIS_MAX_NANO = 2**63 - 1


@pytest.fixture
def replicas(start_replicas, redis_server: RedisServer) -> list[GatewayProcess]:
    """Two replicas, one Redis, the key ``KEY`` limited to ``LIMIT_USD`` (spend_support.limited_replicas)."""
    return limited_replicas(start_replicas, redis_server, KEY, LIMIT_USD)


@pytest.fixture
def money(upstream: ScriptedUpstream, redis_server: RedisServer) -> Money:
    return Money(upstream, redis_server, KEY)


def fallbacks(replicas: list[GatewayProcess]) -> float:
    """Keyed requests whose spend any replica counted in process instead of Redis."""
    return sum(
        r.sample("cascade_spend_fallback_total", reason=reason)
        for r in replicas
        for reason in ("timeout", "error", "down", "epoch", "refused")
    )


PROMPT_LISTS = {
    "strings": [f"Question {i}: what is {i} + {i}?" for i in range(400)],
    "token_arrays": [[1000 + i, 2000, 3000, 4000] for i in range(400)],
}


@pytest.mark.parametrize(
    ("model", "prompts"),
    [("large", "strings"), ("large", "token_arrays"), ("cascade", "strings")],
)
def test_a_list_prompt_reserves_every_prompt_so_a_burst_stays_within_the_limit(
    replicas: list[GatewayProcess], upstream: ScriptedUpstream, money: Money, model: str, prompts: str
) -> None:
    prompt: list[Any] = PROMPT_LISTS[prompts]
    # 400 completions of 50 tokens each (and an honest prompt count, below the body's bytes):
    # 20,000 completion tokens, $0.60 at large's price. The cheap stage is unsure: it escalates.
    upstream.set_default("up-small", ok(confidence=0.3, usage=(1600, 50)))
    upstream.set_default("up-large", ok(usage=(1600, 50)))
    body = {"model": model, "prompt": prompt, "max_tokens": 50}
    statuses = burst(replicas, KEY, 6, endpoint="completions", **body)
    (request,) = {orjson.dumps(c.body["prompt"]) for c in upstream.calls("up-large")}
    assert len(orjson.loads(request)) == 400  # the upstream got every prompt
    route = ["small", "large"] if model == "cascade" else ["large"]
    size = len(orjson.dumps(body))
    worst = sum((size * PRICES[m][0] + 400 * 50 * PRICES[m][1]) / 1e6 for m in route)
    assert worst > LIMIT_USD / 2  # one request's worst case: a second never fits beside it
    assert statuses.count(200) == 1 and statuses.count(429) == 5, statuses
    assert wait_until(lambda: money.pending_reservations() == 0, timeout_s=10)
    assert money.true_usd() <= LIMIT_USD
    assert money.counter_usd() == pytest.approx(money.true_usd(), abs=1e-6)


def test_a_huge_reported_usage_is_settled_exactly_in_redis(
    replicas: list[GatewayProcess], upstream: ScriptedUpstream, money: Money
) -> None:
    # 10^15 completion tokens at small's $1 per Mtok: $10^9, 10^18 nano-USD (past 10^14, where a
    # Lua number prints with an exponent; below what a Redis integer holds).
    upstream.set_default("up-small", ok(usage=(10, 10**15)))
    assert send(replicas[0], KEY, model="small", max_tokens=8)[0] == 200
    assert wait_until(lambda: money.pending_reservations() == 0, timeout_s=10)
    true_nano = (10 * PRICES["small"][0] + 10**15 * PRICES["small"][1]) / 1e6 * NANO_PER_USD
    assert money.counter_usd() * NANO_PER_USD == pytest.approx(true_nano, rel=1e-12)
    assert fallbacks(replicas) == 0 and settled(replicas)
    assert send(replicas[1], KEY, model="small", max_tokens=8)[0] == 429  # far past the limit


def test_a_usage_past_what_redis_holds_is_capped_with_a_logged_error(
    replicas: list[GatewayProcess], upstream: ScriptedUpstream, redis_server: RedisServer, money: Money
) -> None:
    # 10^15 completion tokens at large's $30 per Mtok: $3 * 10^10, more nano-USD than an int64.
    upstream.set_default("up-large", ok(usage=(10, 10**15)))
    assert send(replicas[0], KEY, model="large", max_tokens=8)[0] == 200
    assert wait_until(lambda: money.pending_reservations() == 0, timeout_s=10)
    with redis_server.client() as client:
        counters = [
            int(client.get(name) or 0)
            for name in client.scan_iter(match="cascade:spend:*")
            if name.decode().rsplit(":", 1)[-1].isdigit()
        ]
    assert counters == [REDIS_MAX_NANO]
    assert fallbacks(replicas) == 0 and settled(replicas)
    assert wait_until(lambda: "spend_amount_capped" in replicas[0].log_text(), timeout_s=5)
    assert send(replicas[1], KEY, model="large", max_tokens=8)[0] == 429


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chunk-lying",
        "object": "chat.completion.chunk",
        "model": "up-large",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


STRING_USAGE = {"prompt_tokens": "12", "completion_tokens": "3", "total_tokens": "15"}
WORDS = ["Paris", " is", " nice"]


def test_usage_counts_sent_as_strings_charge_the_prompt_bound_streamed_or_not(
    replicas: list[GatewayProcess], upstream: ScriptedUpstream, money: Money
) -> None:
    true_usd = (12 * PRICES["large"][0] + 3 * PRICES["large"][1]) / 1e6  # what was really used
    events = [
        _chunk({"role": "assistant", "content": ""}),
        *(_chunk({"content": word}) for word in WORDS),
        _chunk({}, finish="stop"),
        {"id": "chunk-lying", "object": "chat.completion.chunk", "choices": [], "usage": STRING_USAGE},
    ]
    answer = {
        "id": "cmpl-lying",
        "object": "chat.completion",
        "model": "up-large",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "".join(WORDS)}, "finish_reason": "stop"}
        ],
        "usage": STRING_USAGE,
    }
    upstream.script("up-large", Reply(stream_events=events, usage=(12, 3)), Reply(body=answer))
    with replicas[0].client(KEY) as client:
        stream = client.chat.completions.create(model="large", messages=MESSAGES, max_tokens=8, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "".join(WORDS)
    assert wait_until(lambda: money.pending_reservations() == 0, timeout_s=10)
    streamed_usd = money.counter_usd()
    assert send(replicas[1], KEY, model="large", max_tokens=8)[0] == 200
    assert wait_until(lambda: money.pending_reservations() == 0, timeout_s=10)
    whole_usd = money.counter_usd() - streamed_usd

    streamed_call, whole_call = upstream.calls("up-large")
    per_in, per_out = PRICES["large"]
    # One rule: no counts, so the prompt at one token per byte of the upstream request; the
    # completion as seen (a stream: one token per output chunk; an answer: its cap, here below
    # the bytes of its choices).
    assert streamed_usd == pytest.approx(
        (len(orjson.dumps(streamed_call.body)) * per_in + len(WORDS) * per_out) / 1e6, abs=1e-9
    )
    assert whole_usd == pytest.approx(
        (len(orjson.dumps(whole_call.body)) * per_in + 8 * per_out) / 1e6, abs=1e-9
    )
    assert streamed_usd >= true_usd and whole_usd >= true_usd


def test_a_sampled_list_prompt_reserves_every_prompt_in_the_shadow_budget(
    start_replicas, upstream: ScriptedUpstream, tmp_path
) -> None:
    # Every request is sampled; the shadow calls of one 400-prompt request (medium and large,
    # 20,000 completion tokens each) may cost about $0.7: more than the $0.5 the hour allows.
    (replica,) = start_replicas(
        1,
        env={"CASCADE_API_KEYS": KEY},
        learning={
            "enabled": True,
            "sample_rate": 1.0,
            "judge": {"kind": "exact"},
            "store": str(tmp_path / "traffic.jsonl"),
            "max_shadow_usd_per_hour": 0.5,
            "flush_interval_s": 0.1,
        },
    )
    upstream.set_default("up-small", ok(usage=(1600, 50)))  # confident: the request is answered by small
    for name in ("up-medium", "up-large"):
        upstream.set_default(name, ok(usage=(1600, 50)))
    status, _ = send(
        replica, KEY, endpoint="completions", model="cascade", prompt=PROMPT_LISTS["strings"], max_tokens=50
    )
    assert status == 200

    def sample_done() -> bool:
        dropped = replica.sample("cascade_learning_dropped_total", reason="spend_cap")
        return dropped > 0 or replica.sample("cascade_learning_rows_written_total") > 0

    assert wait_until(sample_done, timeout_s=15)
    assert replica.sample("cascade_learning_dropped_total", reason="spend_cap") == 1
    assert upstream.calls("up-medium") == [] and upstream.calls("up-large") == []  # nothing bought
    assert replica.sample("cascade_shadow_spend_window_usd") <= 0.5
