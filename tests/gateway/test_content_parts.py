"""Content parts are an allowlist (money.charges.CHAT_PARTS, docs/contracts.md#content-parts): text
passes, a priced part is reserved at its model's declared bound, and a part of any type the gateway
has no bound for is refused (400 ``unsupported_input``) before any call, wherever it is, on every
API, in that API's error shape.

The unknown types are generated (random names, plus the ones upstreams take that the gateway does
not price: vLLM's ``audio_url`` and ``video_url``), so a type an API adds later is covered too.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from money.charges import CHAT_PARTS, PART_KINDS, PRICED_PARTS
from tests.support.gateway_logs import captured_request_line
from tests.support.gateway_testkit import model_configs
from tests.support.money import priced_usd, worst_case_usd
from tests.support.scripted_upstream import ScriptedUpstream, ok

# Part types each API takes (and translates into CHAT_PARTS): a generated name is none of them.
KNOWN = {
    "chat": set(CHAT_PARTS),
    "responses": {"message", "function_call", "function_call_output", "item_reference", "reasoning"}
    | {"input_text", "output_text", "text", "refusal", "input_image"},
    "messages": {"text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking"},
}
TAKEN_UPSTREAM = ["audio_url", "video_url", "image_embeds", "input_audio", "input_file", "document", "video"]


def unknown_types(api: str, count: int = 24) -> list[str]:
    """``count`` part type names ``api`` does not take: real ones other servers take, then random."""
    rng = random.Random(f"content-parts-{api}")
    names = [name for name in TAKEN_UPSTREAM if name not in KNOWN[api]]
    while len(names) < count:
        name = "".join(rng.choices(string.ascii_lowercase + "_", k=rng.randint(1, 14)))
        if name not in KNOWN[api] and name not in names:
            names.append(name)
    return names


def part(part_type: str) -> dict[str, Any]:
    """A part of ``part_type`` shaped as every API shapes one: its payload under its type's name."""
    return {"type": part_type, part_type: {"url": "https://media.example/x"}}


TEXT = {"type": "text", "text": "Hello"}
HI = {"role": "user", "content": "Hi"}
CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
INPUT_TEXT = {"type": "input_text", "text": "Hi"}
FUNCTION_CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
TOOL_USE = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]}


def turn(role: str, *parts: Any) -> dict[str, Any]:
    """A message of ``role`` whose content is ``parts``."""
    return {"role": role, "content": list(parts)}


# api -> position -> (where the part is, the request fields carrying a part there).
Build = Callable[[dict[str, Any]], dict[str, Any]]
POSITIONS: dict[str, dict[str, tuple[str, Build]]] = {
    "chat": {
        "user": ("messages[0].content[1]", lambda p: {"messages": [turn("user", TEXT, p)]}),
        "system": ("messages[0].content[0]", lambda p: {"messages": [turn("system", p), HI]}),
        "developer": ("messages[0].content[0]", lambda p: {"messages": [turn("developer", p), HI]}),
        "assistant": ("messages[1].content[0]", lambda p: {"messages": [HI, turn("assistant", p)]}),
        "tool_result": ("messages[2].content[1]", lambda p: {"messages": [
            HI,
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": [TEXT, p]},
        ]}),
        "content_object": ("messages[0].content", lambda p: {"messages": [{"role": "user", "content": p}]}),
    },
    "responses": {
        "item": ("input[1]", lambda p: {"input": [HI, p]}),
        **{
            role: ("input[0].content[1]", lambda p, r=role: {"input": [turn(r, INPUT_TEXT, p)]})
            for role in ("user", "system", "developer", "assistant")
        },
        "function_call_output": ("input[1].output[1]", lambda p: {"input": [
            FUNCTION_CALL,
            {"type": "function_call_output", "call_id": "c1", "output": [INPUT_TEXT, p]},
        ]}),
    },
    "messages": {
        "system": ("system[1]", lambda p: {"system": [TEXT, p], "messages": [HI]}),
        "user": ("messages[0].content[1]", lambda p: {"messages": [turn("user", TEXT, p)]}),
        "assistant": ("messages[1].content[0]", lambda p: {"messages": [HI, turn("assistant", p)]}),
        "system_message": ("messages[0].content[0]", lambda p: {"messages": [turn("system", p), HI]}),
        "tool_result": ("messages[2].content[0].content[1]", lambda p: {"messages": [
            HI,
            TOOL_USE,
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [TEXT, p]}]},
        ]}),
    },
}  # fmt: skip
REQUESTS = {
    "chat": ("/v1/chat/completions", {"model": "cascade", "max_tokens": 8}),
    "responses": ("/v1/responses", {"model": "cascade", "max_output_tokens": 8}),
    "messages": ("/v1/messages", {"model": "cascade", "max_tokens": 8}),
}


def assert_refused(api: str, response: Any, where: str, part_type: str) -> None:
    """A 400 refusing the part at ``where`` in ``api``'s own error shape."""
    assert response.status_code == 400, (api, where, part_type, response.text)
    body = response.json()
    if api == "messages":  # Anthropic's shape: no code or param, the message says where
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        error = body["error"]
    else:
        error = body["error"]
        assert error["type"] == "invalid_request_error"
        assert (error["code"], error["param"]) == ("unsupported_input", where), error
    assert where in error["message"] and part_type in error["message"], error


@pytest.mark.parametrize(("api", "position"), [(a, p) for a in POSITIONS for p in POSITIONS[a]])
def test_a_part_of_a_type_the_gateway_does_not_price_is_refused_wherever_it_is(
    gateway, upstream: ScriptedUpstream, api: str, position: str
) -> None:
    path, fields = REQUESTS[api]
    where, build = POSITIONS[api][position]
    for part_type in unknown_types(api):
        response = gateway.http.post(
            path, content=orjson.dumps({**fields, **build(part(part_type))}), timeout=10
        )
        assert_refused(api, response, where, part_type)
    assert upstream.calls() == []


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_part_of_no_type_is_refused(gateway, upstream: ScriptedUpstream, api: str) -> None:
    """vLLM reads a part without ``type`` by its keys (``audio_url``: audio): no type is no text."""
    path, fields = REQUESTS[api]
    where, build = POSITIONS[api]["user"]
    response = gateway.http.post(
        path, json={**fields, **build({"audio_url": {"url": "https://a.example/x"}})}
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == "unsupported_input"
    assert response.json()["error"]["param"] == where
    assert upstream.calls() == []


# -- a declared part type is reserved at its bound ----------------------------------------------

# One example of every priced chat part type (a new one in CHAT_PARTS needs one here).
EXAMPLES = {
    "image_url": {"type": "image_url", "image_url": {"url": "https://i.example/cat.png"}},
    "input_audio": {"type": "input_audio", "input_audio": {"data": "UklGRiQAAABXQVZF", "format": "wav"}},
    "file": {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVB="}},
}  # fmt: skip
PRICES = {"large": (10.0, 30.0)}
BOUND = 1_500


def priced_models(base_url: str, part_tokens: dict[str, int]) -> dict[str, Any]:
    configs = model_configs(base_url)
    configs["large"].update(price={"input_per_mtok": 10.0, "output_per_mtok": 30.0}, part_tokens=part_tokens)
    return configs


def three_parts(part_type: str) -> dict[str, Any]:
    parts = [TEXT, *[EXAMPLES[part_type]] * 3]
    return {"model": "large", "max_tokens": 8, "messages": [{"role": "user", "content": parts}]}


def test_every_priced_type_is_a_declarable_kind() -> None:
    assert set(EXAMPLES) == set(PRICED_PARTS) and set(PRICED_PARTS.values()) == set(PART_KINDS)


@pytest.mark.parametrize("part_type", list(PRICED_PARTS))
def test_a_declared_part_type_is_reserved_at_its_bound_and_charged_what_was_billed(
    start_gateway, make_settings, upstream: ScriptedUpstream, capfd, part_type: str
) -> None:
    kind = PRICED_PARTS[part_type]
    upstream.set_default(
        "up-large", ok("yes", usage=(20, 3), part_tokens={part_type: BOUND}, honour_cap=True)
    )
    models = priced_models(upstream.base_url, {kind: BOUND})
    gateway = start_gateway(make_settings(models=models, logging={"level": "info"}))
    body = three_parts(part_type)
    assert gateway.http.post("/v1/chat/completions", content=orjson.dumps(body)).status_code == 200

    line = captured_request_line(capfd)
    reserved = worst_case_usd(body, ["large"], PRICES) + 3 * BOUND * 10.0 / 1e6
    assert line["worst_case_usd"] == pytest.approx(reserved)
    assert line["cost_usd"] == pytest.approx(priced_usd(upstream.billed, {"up-large": PRICES["large"]}))
    assert line["cost_usd"] == pytest.approx(((20 + 3 * BOUND) * 10.0 + 3 * 30.0) / 1e6)


@pytest.mark.parametrize("part_type", list(PRICED_PARTS))
def test_a_priced_part_type_its_model_declares_no_bound_for_is_refused(
    start_gateway, make_settings, upstream: ScriptedUpstream, part_type: str
) -> None:
    others = {kind: BOUND for kind in PART_KINDS if kind != PRICED_PARTS[part_type]}
    gateway = start_gateway(make_settings(models=priced_models(upstream.base_url, others)))
    response = gateway.http.post("/v1/chat/completions", content=orjson.dumps(three_parts(part_type)))
    assert response.status_code == 400 and response.json()["error"]["code"] == "unsupported_input"
    assert f"part_tokens.{PRICED_PARTS[part_type]}" in response.json()["error"]["message"]
    assert upstream.calls() == []
