"""``/v1/responses`` is the same gateway as chat: spend reserved for everything the translation
sends, metrics and the request log line labelled ``endpoint="responses"``, learning samples."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from learning_support import learning_block

from tests.support.gateway_logs import captured_request_lines
from tests.support.gateway_testkit import model_configs, until
from tests.support.scripted_upstream import ok
from tests.support.traffic_rows import stored_rows

QUESTION = "What is the capital of France?"
PROMPT = ("messages", "tools", "tool_choice", "response_format")


def _big_tools(count: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "name": f"tool_{i}",
            "description": f"Tool number {i}: looks something up.",
            "parameters": {
                "type": "object",
                "properties": {
                    f"arg_{j}": {"type": "string", "description": "an argument"} for j in range(6)
                },
                "required": ["arg_0"],
            },
        }
        for i in range(count)
    ]


CASES = {
    "long-instructions": {"instructions": "Follow the house rules. " * 800, "input": QUESTION},
    "big-tools": {"input": QUESTION, "tools": _big_tools(40), "tool_choice": "auto"},
    "items-and-tools": {
        "instructions": "Use the tools. " * 200,
        "tools": _big_tools(20),
        "input": [
            {"role": "user", "content": QUESTION},
            {"type": "function_call", "call_id": "c1", "name": "tool_1", "arguments": '{"arg_0": "x"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "result " * 300},
        ],
    },
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_no_request_costs_more_than_its_reservation(
    start_gateway, make_settings, upstream, capfd, case, stream
):
    # Every stage priced per token, and the upstream bills the worst a provider could: one prompt token
    # per byte of the JSON of every prompt-bearing field it received (messages, tools, tool_choice,
    # response_format: a token is at least a byte of their text, and their JSON keys and quotes
    # outnumber the chat template's own tokens) and the whole output cap.
    models = model_configs(upstream.base_url)
    models["large"]["price"] = {"input_per_mtok": 3.0, "output_per_mtok": 15.0}
    gateway = start_gateway(make_settings(models=models, logging={"level": "info"}))
    cap = 64
    raw = orjson.dumps({"model": "cascade", "max_output_tokens": cap, "stream": stream, **CASES[case]})
    post = {"content": raw, "headers": {"content-type": "application/json"}, "timeout": 20}

    # First, what the translation sends upstream for this request (deterministic).
    upstream.script("up-small", ok("Lyon?", confidence=0.3))
    assert gateway.http.post("/v1/responses", **post).status_code == 200
    sent = [
        len(orjson.dumps({k: v for k, v in call.body.items() if k in PROMPT})) for call in upstream.calls()
    ]
    assert len(sent) == 2
    if "tools" in CASES[case]:  # chat nests each tool one level deeper: the client's bytes would fall short
        assert max(sent) > len(raw)

    # Then the same request, escalated, billed that worst case at both stages.
    upstream.reset()
    assert len(captured_request_lines(capfd, 1)) == 1  # the first request's line, written after its response
    upstream.script("up-small", ok("Lyon?", confidence=0.3, usage=(sent[0], cap)))
    upstream.script("up-large", ok("Paris.", usage=(sent[1], cap)))
    response = gateway.http.post("/v1/responses", **post)
    assert response.status_code == 200
    assert response.headers["x-cascade-escalated"] == "true"
    true_cost = (sent[0] * 0.1 + cap * 0.2) / 1e6 + (sent[1] * 3.0 + cap * 15.0) / 1e6
    (line,) = captured_request_lines(capfd, 1)
    assert line["endpoint"] == "responses"
    assert line["cost_usd"] == pytest.approx(true_cost)
    if stream:  # the headers left before the live stage was charged; the closing event knows it all
        completed = json.loads(response.text.rsplit("data: ", 1)[1])
        assert completed["type"] == "response.completed"
        assert completed["response"]["cascade"]["cost_usd"] == pytest.approx(true_cost)
    else:
        assert float(response.headers["x-cascade-cost-usd"]) == pytest.approx(true_cost)
    assert line["worst_case_usd"] >= line["cost_usd"]


def test_metrics_and_log_lines_are_labelled_by_endpoint(
    start_gateway, make_settings, upstream, capfd
) -> None:
    gateway = start_gateway(make_settings(logging={"level": "info"}))
    upstream.script(
        "up-small", ok("Paris.", confidence=0.99), ok("Lyon?", confidence=0.3), ok("Paris.", confidence=0.99)
    )
    client = gateway.client()
    client.responses.create(model="cascade", input=QUESTION)  # accepted
    client.responses.create(model="cascade", input=QUESTION)  # escalated
    client.chat.completions.create(model="cascade", messages=[{"role": "user", "content": QUESTION}])
    gateway.http.post("/v1/responses", json={"model": "cascade"}, timeout=5)  # refused
    sample = gateway.sample
    assert sample("cascade_requests_total", tier="balanced", outcome="accepted", endpoint="responses") == 1
    assert sample("cascade_requests_total", tier="balanced", outcome="escalated", endpoint="responses") == 1
    assert sample("cascade_requests_total", tier="none", outcome="error", endpoint="responses") == 1
    assert sample("cascade_requests_total", tier="balanced", outcome="accepted", endpoint="chat") == 1
    assert sample("cascade_overhead_seconds_count", endpoint="responses") == 3
    assert sample("cascade_request_duration_seconds_count", tier="balanced", endpoint="responses") == 2
    lines = captured_request_lines(capfd, 4)
    assert [(x["endpoint"], x["path"], x["status"]) for x in lines] == [
        ("responses", "/v1/responses", 200),
        ("responses", "/v1/responses", 200),
        ("chat", "/v1/chat/completions", 200),
        ("responses", "/v1/responses", 400),
    ]
    assert lines[1]["escalated"] is True and lines[1]["models_called"] == ["small", "large"]


def test_responses_requests_are_sampled_for_learning(
    start_gateway, make_settings, upstream, tmp_path
) -> None:
    store = f"file://{tmp_path / 'traffic.jsonl'}"
    upstream.set_default("up-small", ok("Paris", confidence=0.99))
    upstream.set_default("up-medium", ok("Lyon", confidence=0.99))
    upstream.set_default("up-large", ok("Paris", confidence=0.99))
    gateway = start_gateway(make_settings(learning=learning_block(store, log_text=True)))
    raw = gateway.client().responses.with_raw_response.create(
        model="cascade", input=QUESTION, instructions="One word."
    )
    request_id = raw.headers["x-request-id"]
    assert until(lambda: len(stored_rows(store)) >= 3, 20.0)
    rows = {row.model: row for row in stored_rows(store)}
    assert {row.query_id for row in rows.values()} == {request_id}
    assert (rows["small"].correct, rows["medium"].correct) == (1.0, 0.0)
    assert rows["small"].tier == "balanced"
    assert rows["small"].prompt == f"system: One word.\n\nuser: {QUESTION}"
    assert gateway.sample("cascade_learning_sampled_total", tier="balanced") == 1
