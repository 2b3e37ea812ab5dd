"""A real llama-server reply whose call is written as content (tests/support/replies/), served by a
model configured ``tool_calls: content``: scored on its raw tokens, then returned to the official SDKs
as a proper tool call, non-streamed and streamed, on the chat, Responses and Messages APIs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.chat import ChatCompletionMessageToolCall

from policies import score_response
from tests.support.gateway_testkit import RunningGateway, model_configs
from tests.support.recorded_replies import CALL_AS_CONTENT
from tests.support.scripted_upstream import Reply

RECORDED = CALL_AS_CONTENT
REQUEST: dict[str, Any] = RECORDED["request"]
QUESTION = REQUEST["messages"]
TOOLS = REQUEST["tools"]
FUNCTION = TOOLS[0]["function"]
ARGUMENTS = {"base": 10, "height": 5, "unit": "units"}


def reply() -> Reply:
    """The recorded reply, sent as it came (a fresh copy: the gateway normalizes answers in place)."""
    return Reply(body=json.loads(json.dumps(RECORDED["reply"])))


@pytest.fixture
def content_models(start_gateway, make_settings, upstream) -> RunningGateway:
    """The test gateway with ``small`` and ``large`` writing calls as content."""
    models = model_configs(upstream.base_url)
    for name in ("small", "large"):
        models[name]["tool_calls"] = "content"
    return start_gateway(make_settings(models=models))


def test_the_recorded_reply_writes_its_call_as_content_with_logprobs_over_it() -> None:
    choice = RECORDED["reply"]["choices"][0]
    assert choice["message"].get("tool_calls") is None
    assert choice["message"]["content"].startswith("```json\n{")
    tokens = "".join(entry["token"] for entry in choice["logprobs"]["content"])
    assert tokens == choice["message"]["content"]  # the content logprobs are the call's tokens


def test_a_call_written_as_content_is_scored_then_returned_as_a_tool_call(content_models, upstream) -> None:
    upstream.script("up-small", reply())
    raw = content_models.client().chat.completions.with_raw_response.create(
        model="cascade", messages=QUESTION, tools=TOOLS
    )
    completion = raw.parse()
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (tool_call,) = choice.message.tool_calls or []
    assert isinstance(tool_call, ChatCompletionMessageToolCall)
    assert tool_call.id.startswith("call_") and tool_call.type == "function"
    assert tool_call.function.name == FUNCTION["name"]
    assert json.loads(tool_call.function.arguments) == ARGUMENTS
    # Scored on the raw reply: the score of the call's own tokens, above the threshold.
    expected = score_response(RECORDED["reply"], "mean_token_negentropy", 5)
    assert expected is not None and expected > 0.5
    assert float(raw.headers["x-cascade-score"]) == pytest.approx(expected, rel=1e-5)
    assert raw.headers["x-cascade-models-called"] == "small"


def test_a_native_model_keeps_its_content(gateway, upstream) -> None:
    upstream.script("up-small", reply())
    completion = gateway.client().chat.completions.create(model="cascade", messages=QUESTION, tools=TOOLS)
    message = completion.choices[0].message
    assert (
        message.tool_calls is None
        and message.content == RECORDED["reply"]["choices"][0]["message"]["content"]
    )


def test_a_request_without_tools_is_not_normalized(content_models, upstream) -> None:
    upstream.script("up-small", reply())
    completion = content_models.client().chat.completions.create(model="cascade", messages=QUESTION)
    assert completion.choices[0].message.content.startswith("```json")
    assert completion.choices[0].message.tool_calls is None


def test_a_streamed_accepted_call_reaches_the_sdk_as_a_tool_call(content_models, upstream) -> None:
    upstream.script("up-small", reply())
    with content_models.client().chat.completions.stream(
        model="cascade", messages=QUESTION, tools=TOOLS
    ) as stream:
        final = stream.get_final_completion()
    (tool_call,) = final.choices[0].message.tool_calls or []
    assert tool_call.function.name == FUNCTION["name"]
    assert json.loads(tool_call.function.arguments) == ARGUMENTS
    assert final.choices[0].finish_reason == "tool_calls"


def test_a_streamed_final_stage_is_fetched_whole_and_replayed(content_models, upstream) -> None:
    upstream.script("up-large", reply())
    with content_models.client().chat.completions.stream(
        model="cascade/direct", messages=QUESTION, tools=TOOLS
    ) as stream:
        final = stream.get_final_completion()
    (tool_call,) = final.choices[0].message.tool_calls or []
    assert json.loads(tool_call.function.arguments) == ARGUMENTS
    (sent,) = upstream.calls("up-large")
    assert "stream" not in sent.body  # a call written as content cannot be normalized token by token


def test_the_responses_api_returns_a_function_call_item(content_models, upstream) -> None:
    upstream.script("up-small", reply())
    tool = {"type": "function", "name": FUNCTION["name"], "parameters": FUNCTION["parameters"]}
    response = content_models.client().responses.create(
        model="cascade", input=QUESTION[0]["content"], tools=[tool]
    )
    (item,) = response.output
    assert item.type == "function_call" and item.name == FUNCTION["name"]
    assert json.loads(item.arguments) == ARGUMENTS


def test_the_messages_api_returns_a_tool_use_block(content_models, upstream) -> None:
    upstream.script("up-small", reply())
    client = content_models.anthropic_client()
    tool = {"name": FUNCTION["name"], "input_schema": FUNCTION["parameters"]}
    message = client.messages.create(
        model="cascade",
        max_tokens=128,
        messages=[{"role": "user", "content": QUESTION[0]["content"]}],
        tools=[tool],
    )
    (block,) = message.content
    assert block.type == "tool_use" and block.name == FUNCTION["name"] and block.input == ARGUMENTS
    assert message.stop_reason == "tool_use"


def test_a_streamed_responses_call_arrives_as_a_function_call_item(content_models, upstream) -> None:
    upstream.script("up-small", reply())
    tool = {"type": "function", "name": FUNCTION["name"], "parameters": FUNCTION["parameters"]}
    with content_models.client().responses.stream(
        model="cascade", input=QUESTION[0]["content"], tools=[tool]
    ) as stream:
        response = stream.get_final_response()
    (item,) = response.output
    assert item.type == "function_call" and item.name == FUNCTION["name"]
    assert json.loads(item.arguments) == ARGUMENTS


def test_a_streamed_messages_call_arrives_as_a_tool_use_block(content_models, upstream) -> None:
    upstream.script("up-small", reply())
    client = content_models.anthropic_client()
    tool = {"name": FUNCTION["name"], "input_schema": FUNCTION["parameters"]}
    with client.messages.stream(
        model="cascade",
        max_tokens=128,
        messages=[{"role": "user", "content": QUESTION[0]["content"]}],
        tools=[tool],
    ) as stream:
        message = stream.get_final_message()
    (block,) = message.content
    assert block.type == "tool_use" and block.input == ARGUMENTS
    assert message.stop_reason == "tool_use"
