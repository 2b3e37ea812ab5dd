"""The Responses stream translator on the engine's own replay bytes (an accepted answer with text
and tool calls, as gateway.streaming.sse.replay writes it) and on a failure before any chunk."""

from __future__ import annotations

import json

import orjson

from gateway.api.edges.responses import ResponsesEdge
from gateway.streaming.sse import replay
from gateway.wire.errors import UpstreamTimeoutError


def _events(data: bytes) -> list[dict]:
    out = []
    for block in data.decode().split("\n\n"):
        if not block:
            continue
        name, payload = block.split("\n")
        event = json.loads(payload.removeprefix("data: "))
        assert name == "event: " + event["type"]
        out.append(event)
    return out


def _translated(stream: bool = True):
    raw = orjson.dumps({"model": "cascade", "input": "Weather?", "stream": stream, "max_output_tokens": 9})
    return ResponsesEdge().translate(raw, "0123456789abcdef01234567")


def test_a_replayed_answer_with_text_and_tool_calls() -> None:
    translated = _translated()
    body = {
        "id": "c",
        "created": 1,
        "model": "small",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Checking.",
                    "tool_calls": [
                        {
                            "id": "call_a",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"x": 1}'},
                        },
                        {"id": "call_b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
    }
    data = replay(body, translated.request, {"model": "small", "escalated": False})
    translator = ResponsesEdge().stream_translator(translated.context)
    events = _events(translator.translate(data))
    kinds = [e["type"] for e in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]["response"]
    assert final["id"] == "resp_0123456789abcdef01234567" and final["model"] == "small"
    assert [item["type"] for item in final["output"]] == ["message", "function_call", "function_call"]
    assert [(i["call_id"], i["name"], i["arguments"]) for i in final["output"][1:]] == [
        ("call_a", "f", '{"x": 1}'),
        ("call_b", "g", "{}"),
    ]
    assert final["usage"] == {
        "input_tokens": 7,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 3,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 10,
    }
    assert final["cascade"] == {"model": "small", "escalated": False}
    assert final["max_output_tokens"] == 9 and final["store"] is False


def test_a_failure_before_any_chunk_still_opens_the_response() -> None:
    translated = _translated()
    translator = ResponsesEdge().stream_translator(translated.context)
    events = _events(translator.fail(UpstreamTimeoutError("upstream 'large' timed out")))
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "error",
        "response.failed",
    ]
    assert events[2]["code"] == "upstream_timeout"
    assert events[3]["response"]["status"] == "failed"
    assert events[3]["response"]["error"] == {"code": "server_error", "message": "upstream 'large' timed out"}


def test_a_truncated_answer_ends_with_response_incomplete() -> None:
    translated = _translated()
    body = {
        "id": "c",
        "created": 1,
        "model": "large",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Par"}, "finish_reason": "length"}
        ],
    }
    data = replay(body, translated.request, {})
    events = _events(ResponsesEdge().stream_translator(translated.context).translate(data))
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert events[-1]["response"]["output"][0]["status"] == "incomplete"
    assert events[-1]["response"]["usage"] is None  # the upstream reported none
