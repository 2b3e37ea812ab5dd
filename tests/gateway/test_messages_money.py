"""Money on /v1/messages: no request's true cost exceeds its spend reservation, although the
translation sends more than the client wrote (tool schemas wrapped as chat functions, tool inputs
re-encoded as JSON strings), and the gateway charges exactly that true cost.

The scripted upstream bills, per call, one prompt token per byte of the ``messages`` and ``tools``
JSON it received (more than any tokenizer counts for the text a chat template renders from them)
and the full ``max_tokens`` of completion: the most a provider could bill for what was sent.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.api.edges.messages_request import translate_request
from tests.support.gateway_testkit import RunningGateway, model_configs
from tests.support.scripted_upstream import ok

MAX_TOKENS = 50
PRICES = {  # USD per million tokens: both stages priced by token, so every sent byte counts
    "small": {"input_per_mtok": 0.1, "output_per_mtok": 0.2},
    "large": {"input_per_mtok": 10.0, "output_per_mtok": 30.0},
}


def big_request(stream: bool) -> dict[str, Any]:
    """A long system prompt, 30 tools with wide schemas and a tool round trip with a large input."""
    schema = {
        "type": "object",
        "properties": {
            f"field_{i}": {"type": "string", "description": f'the "{i}" field'} for i in range(20)
        },
        "required": ["field_0"],
    }
    tools = [
        {"name": f"tool_{n}", "description": "does a thing " * 10, "input_schema": schema} for n in range(30)
    ]
    tool_input = {f"key_{i}": f'a "quoted" value {i}' for i in range(200)}  # re-encoded as an escaped string
    return {
        "model": "cascade",
        "max_tokens": MAX_TOKENS,
        "stream": stream,
        "system": [
            {"type": "text", "text": "You are careful. " * 600, "cache_control": {"type": "ephemeral"}}
        ],
        "tools": tools,
        "messages": [
            {"role": "user", "content": "Run tool_0."},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "tool_0", "input": tool_input}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "done " * 100}],
            },
        ],
    }


def billed_prompt_tokens(chat: dict[str, Any]) -> int:
    return len(orjson.dumps({"messages": chat["messages"], "tools": chat.get("tools")}))


@pytest.fixture
def budgeted(
    start_gateway, make_settings, upstream, monkeypatch
) -> tuple[RunningGateway, list[int], list[int]]:
    """A keyed gateway with a spend limit; the amounts it reserves and settles (nano-USD), recorded."""
    monkeypatch.setenv("TEST_CLIENT_KEYS", "sk-money")
    models = model_configs(upstream.base_url)
    for name, price in PRICES.items():
        models[name]["price"] = price
    gateway = start_gateway(
        make_settings(
            models=models,
            auth={"api_keys_env": "TEST_CLIENT_KEYS", "admin_key_env": None},
            budgets={"limit_usd": 100.0, "window_s": 3600},
        )
    )
    spend = gateway.gateway.shared.spend
    reserved: list[int] = []
    settled: list[int] = []
    reserve, settle = spend.reserve, spend.settle

    async def recording_reserve(identity: Any, amount_usd: float, *rest: Any) -> Any:
        reservation = await reserve(identity, amount_usd, *rest)
        reserved.append(reservation.amount_nano)
        return reservation

    async def recording_settle(reservation: Any, actual_usd: float, *rest: Any) -> None:
        if reservation is not None and not reservation.settled:
            settled.append(round(actual_usd * 1e9))
        await settle(reservation, actual_usd, *rest)

    monkeypatch.setattr(spend, "reserve", recording_reserve)
    monkeypatch.setattr(spend, "settle", recording_settle)
    return gateway, reserved, settled


def true_cost_nano(upstream: Any) -> int:
    total = 0.0
    for produced in upstream.produced:
        price = PRICES["small" if produced.model == "up-small" else "large"]
        total += (
            produced.prompt_tokens * price["input_per_mtok"]
            + produced.completion_tokens * price["output_per_mtok"]
        )
    return round(total * 1e3)  # USD per Mtok * tokens = micro-USD; * 1e3 = nano-USD


@pytest.mark.parametrize("stream", [False, True])
def test_an_escalated_request_heavy_with_tools_costs_no_more_than_its_reservation(
    budgeted, upstream, stream
) -> None:
    gateway, reserved, settled = budgeted
    raw = orjson.dumps(big_request(stream))
    chat = translate_request(raw).chat
    prompt = billed_prompt_tokens(chat)
    assert prompt > len(raw)  # what the translation sends outweighs what the client wrote
    upstream.script("up-small", ok(confidence=0.3, usage=(prompt, MAX_TOKENS)))  # unsure: escalates
    upstream.script("up-large", ok("All done.", usage=(prompt, MAX_TOKENS)))
    sdk = gateway.anthropic_client("sk-money")
    body = orjson.loads(raw)
    if stream:
        body.pop("stream")
        with sdk.messages.stream(**body) as events:
            final = events.get_final_message()
        cost_header = events.response.headers["x-cascade-cost-usd"]
    else:
        raw_response = sdk.messages.with_raw_response.create(**body)
        final, cost_header = raw_response.parse(), raw_response.headers["x-cascade-cost-usd"]
    assert final.content[0].text == "All done."
    for call in upstream.requests:  # the billed count is of exactly what was sent
        assert billed_prompt_tokens(call.body) == prompt
    assert [p.model for p in upstream.produced] == ["up-small", "up-large"]
    spent = true_cost_nano(upstream)
    assert len(reserved) == 1 and spent <= reserved[0]
    assert settled == [pytest.approx(spent, abs=1)]  # the key is charged the true cost
    if not stream:  # a stream's headers leave before its live stage is charged
        assert float(cost_header) * 1e9 == pytest.approx(spent, abs=1)
