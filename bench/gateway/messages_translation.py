"""CPU time the /v1/messages edge adds per request: translate + render, against the chat identity edge.

The endpoint does the same work for every edge (auth, routing, spend, the cascade, headers, logs);
what differs is the edge's ``translate`` (parse, translate, encode the chat body once to size the
reservation) and ``render`` (the answer in the API's shape). Both are timed in process, best of
``--repeat`` runs, for a short question and for a Claude-Code-sized request (a 7 KB system prompt
in blocks, 20 tools with wide schemas, a system-reminder block), each against the same request
sent as chat. At 1 client this is the added latency of the translation on the accept path.

    .venv/bin/python bench/gateway/messages_translation.py
"""

from __future__ import annotations

import argparse
import timeit
from typing import Any

import orjson

from gateway.api.edges.base import ApiEdge, OpenAIEdge
from gateway.api.edges.messages import MessagesEdge
from gateway.api.edges.messages_request import translate_request

ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "small",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Paris is the capital of France."},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18},
}


def short_request() -> dict[str, Any]:
    return {
        "model": "cascade",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Capital of France?"}],
    }


def agent_request() -> dict[str, Any]:
    schema = {
        "type": "object",
        "$schema": "http://json-schema.org/draft-07/schema#",
        "additionalProperties": False,
        "properties": {f"arg_{i}": {"type": "string", "description": "an argument " * 4} for i in range(8)},
        "required": ["arg_0"],
    }
    ephemeral = {"type": "ephemeral"}
    return {
        "model": "cascade/balanced",
        "max_tokens": 32000,
        "stream": True,
        "metadata": {"user_id": "u" * 120},
        "thinking": {"type": "adaptive", "display": "omitted"},
        "output_config": {"effort": "high"},
        "system": [
            {"type": "text", "text": "x-header: v=1;"},
            {"type": "text", "text": "You are an agent. " * 20, "cache_control": ephemeral},
            {"type": "text", "text": "Follow the rules. " * 380, "cache_control": ephemeral},
        ],
        "tools": [
            {"name": f"Tool{n}", "description": "Does something useful. " * 30, "input_schema": schema}
            for n in range(20)
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>" + "context " * 100 + "</system-reminder>"},
                    {"type": "text", "text": "Say hello", "cache_control": ephemeral},
                ],
            }
        ],
    }


def per_request_us(edges: list[tuple[ApiEdge, bytes]], number: int, repeat: int) -> list[float]:
    """Best-of-``repeat`` microseconds per request of each (edge, body), runs interleaved so that
    load from other processes hits every edge alike."""
    best = [float("inf")] * len(edges)
    for _ in range(repeat):
        for i, (edge, raw) in enumerate(edges):

            def once(edge: ApiEdge = edge, raw: bytes = raw) -> None:
                translated = edge.translate(raw, "bench")
                edge.render(ANSWER, translated.context)

            best[i] = min(best[i], timeit.timeit(once, number=number) / number * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    messages, chat = MessagesEdge(), OpenAIEdge("chat")
    print("| request | bytes (messages / chat) | chat edge us | messages edge us | added us |")
    print("|---|---|---|---|---|")
    for name, body, number in (
        ("short question", short_request(), 20000),
        ("agent-sized", agent_request(), 300),
    ):
        raw = orjson.dumps(body)
        as_chat = orjson.dumps(translate_request(raw).chat)
        chat_us, messages_us = per_request_us([(chat, as_chat), (messages, raw)], number, args.repeat)
        added = messages_us - chat_us
        print(f"| {name} | {len(raw)} / {len(as_chat)} | {chat_us:.1f} | {messages_us:.1f} | {added:.1f} |")


if __name__ == "__main__":
    main()
