"""Streamed ``/v1/responses`` (``stream: true``): the documented event sequence, from a replayed
(accepted) answer and a live (escalated) one, streamed tool calls, and errors inside a stream."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.support.scripted_upstream import error, ok

SDK = "openai-sdk"
QUESTION = "What is the capital of France?"
TEXT_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",  # a replayed (accepted) answer is one delta
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


def sse_events(gateway, body: dict, headers: dict | None = None) -> tuple[httpx.Response, list[dict]]:
    """POST a streamed request; the response and its events (``event:`` name checked against ``type``)."""
    events = []
    with gateway.http.stream(
        "POST", "/v1/responses", json={**body, "stream": True}, headers=headers, timeout=20
    ) as response:
        name = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                event = json.loads(line[6:])
                assert event["type"] == name
                events.append(event)
    return response, events


def test_accepted_answer_is_replayed_as_the_documented_events(gateway, upstream) -> None:
    upstream.script("up-small", ok("Paris is", confidence=0.99))
    response, events = sse_events(gateway, {"model": "cascade", "input": QUESTION})
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-cascade-escalated"] == "false"
    assert [e["type"] for e in events] == TEXT_EVENTS
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == "Paris is"
    assert events[5]["text"] == "Paris is"
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["model"] == "small"
    assert final["output"][0]["content"][0]["text"] == "Paris is"
    assert final["usage"]["input_tokens"] == 10 and final["usage"]["output_tokens"] == 5
    assert final["cascade"]["model"] == "small" and final["cascade"]["escalated"] is False
    item_ids = {e["item_id"] for e in events if "item_id" in e}
    assert item_ids == {final["output"][0]["id"]}


@pytest.mark.compat(client=SDK, feature="stream")
def test_escalated_answer_streams_live_through_the_sdk(gateway, upstream) -> None:
    upstream.script("up-small", ok("Lyon?", confidence=0.3))
    upstream.script("up-large", ok("Paris is the capital."))
    raw = gateway.client().responses.with_raw_response.create(model="cascade", input=QUESTION, stream=True)
    assert raw.headers["x-cascade-escalated"] == "true"
    events = list(raw.parse())
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == "Paris is the capital." and len(deltas) == 4
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "Paris is the capital."
    assert events[-1].response.usage.output_tokens == 5
    assert upstream.calls("up-large")[0].body["stream"] is True


@pytest.mark.compat(client=SDK, feature="stream")
def test_stream_helper_collects_the_final_response(gateway, upstream) -> None:
    upstream.script("up-small", ok("Paris.", confidence=0.99))
    with gateway.client().responses.stream(model="cascade", input=QUESTION) as stream:
        texts = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(texts) == "Paris." == final.output_text


@pytest.mark.compat(client=SDK, feature="stream")
def test_async_stream(gateway, upstream) -> None:
    import asyncio

    upstream.script("up-small", ok("Paris.", confidence=0.99))

    async def collect() -> list[str]:
        async with gateway.async_client() as client:
            stream = await client.responses.create(model="cascade", input=QUESTION, stream=True)
            return [event.type async for event in stream]

    assert asyncio.run(collect()) == TEXT_EVENTS


def _chunk(delta: dict | None = None, finish: str | None = None, usage: dict | None = None) -> dict:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "up-large",
        "choices": choices,
    } | ({"usage": usage} if usage else {})


TOOL_STREAM = [
    _chunk({"role": "assistant", "content": "Let me check."}),
    _chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_7",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ]
        }
    ),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
    _chunk({}, finish="tool_calls"),
    _chunk(usage={"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}),
]


@pytest.mark.compat(client=SDK, feature="tools")
def test_streamed_tool_call_events(gateway, upstream) -> None:
    upstream.script("up-large", ok(stream_events=TOOL_STREAM))
    tool = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    stream = gateway.client().responses.create(
        model="cascade/direct", input="Weather in Paris?", tools=[tool], stream=True
    )
    events = list(stream)
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",  # the message
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",  # the function call
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    done = events[11]
    assert (done.name, done.arguments, done.output_index) == ("get_weather", '{"city": "Paris"}', 1)
    final = events[-1].response
    message, call = final.output
    assert message.content[0].text == "Let me check."
    assert (call.type, call.call_id, call.name, call.arguments) == (
        "function_call",
        "call_7",
        "get_weather",
        '{"city": "Paris"}',
    )
    assert final.usage.total_tokens == 42


def test_a_stream_that_fails_after_it_started_ends_with_error_and_response_failed(gateway, upstream) -> None:
    upstream.script("up-small", ok("Lyon?", confidence=0.3))
    upstream.script("up-large", ok("Paris is the capital of France.", break_stream_after=3))
    response, events = sse_events(gateway, {"model": "cascade", "input": QUESTION})
    assert response.status_code == 200
    kinds = [e["type"] for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-2:] == ["error", "response.failed"] and "response.completed" not in kinds
    assert events[-2]["code"] == "upstream_failed" and events[-2]["message"]
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_the_sdk_sees_the_in_stream_failure(gateway, upstream) -> None:
    upstream.script("up-small", ok("Lyon?", confidence=0.3))
    upstream.script("up-large", ok("Paris is the capital of France.", break_stream_after=3))
    events = list(gateway.client().responses.create(model="cascade", input=QUESTION, stream=True))
    assert [e.type for e in events[-2:]] == ["error", "response.failed"]
    assert events[-1].response.error.message == events[-2].message


def test_a_failure_before_the_stream_started_is_an_http_error(gateway, upstream) -> None:
    upstream.script("up-large", error(500), error(500))
    with pytest.raises(openai.APIStatusError) as caught:
        gateway.client().responses.create(model="cascade/direct", input=QUESTION, stream=True)
    assert caught.value.status_code == 502
    assert caught.value.body["code"] == "upstream_failed"
