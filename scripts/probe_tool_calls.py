"""Ask OpenAI-compatible upstreams three BFCL-simple-style questions with tools (docs/tool-calls.md).

Usage: ``python scripts/probe_tool_calls.py BASE_URL=MODEL [BASE_URL=MODEL ...] [--record FILE]``,
e.g. ``http://127.0.0.1:9102/v1=qwen2.5-coder-0.5b``. Each question declares one function and asks
for ``logprobs`` (top 5) at temperature 0. Prints one JSON line per answer: whether the call came
back in ``tool_calls`` or written in ``content``, the finish reason, how many tokens carry logprobs
and whether those tokens spell the content (then the content logprobs are the call's tokens).
``--record FILE`` writes the first question's request and the first upstream's raw reply to FILE
(the fixture of tests/gateway/test_tool_calls_real.py). Upstream keys: ``OPENAI_API_KEY`` if set.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.request
from typing import Any


def _function(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": required}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}


def _integer(description: str) -> dict[str, str]:
    return {"type": "integer", "description": description}


QUESTIONS: list[tuple[str, dict[str, Any]]] = [
    (
        "Find the area of a triangle with a base of 10 units and height of 5 units.",
        _function(
            "calculate_triangle_area",
            "Calculate the area of a triangle given its base and height.",
            {
                "base": _integer("The base of the triangle."),
                "height": _integer("The height of the triangle."),
                "unit": {"type": "string", "description": "The unit of measure (defaults to 'units')."},
            },
            ["base", "height"],
        ),
    ),
    (
        "Calculate the factorial of 5 using math functions.",
        _function(
            "math.factorial",
            "Calculate the factorial of a given number.",
            {"number": _integer("The number for which factorial needs to be calculated.")},
            ["number"],
        ),
    ),
    (
        "Calculate the hypotenuse of a right triangle given the lengths of the other two sides as 4 and 5.",
        _function(
            "math.hypot",
            "Calculate the Euclidean norm, sqrt(sum(squares)): the hypotenuse of the right triangle.",
            {
                "x": _integer("The x-coordinate value."),
                "y": _integer("The y-coordinate value."),
                "z": _integer("Optional. The z-coordinate value. Default is 0."),
            },
            ["x", "y"],
        ),
    ),
]


def request_body(model: str, question: str, tool: dict[str, Any]) -> dict[str, Any]:
    """The chat request the probe sends."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": question}],
        "tools": [tool],
        "logprobs": True,
        "top_logprobs": 5,
        "temperature": 0,
        "max_tokens": 128,
    }


def ask(base_url: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST one chat completion; the parsed reply."""
    headers = {"content-type": "application/json"}
    if os.environ.get("OPENAI_API_KEY"):
        headers["authorization"] = f"Bearer {os.environ['OPENAI_API_KEY']}"
    request = urllib.request.Request(
        base_url.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(), headers=headers
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        reply: dict[str, Any] = json.load(response)
    return reply


def summary(model: str, reply: dict[str, Any], seconds: float) -> dict[str, Any]:
    """What the probe reports of one answer."""
    choice = reply["choices"][0]
    message = choice.get("message") or {}
    entries = (choice.get("logprobs") or {}).get("content") or []
    content = message.get("content") or ""
    return {
        "model": model,
        "seconds": round(seconds, 1),
        "finish_reason": choice.get("finish_reason"),
        "tool_calls": message.get("tool_calls"),
        "content": content,
        "logprob_tokens": len(entries),
        "logprob_tokens_spell_content": "".join(e.get("token", "") for e in entries) == content,
        "completion_tokens": (reply.get("usage") or {}).get("completion_tokens"),
    }


def main() -> None:
    """Probe every upstream with every question; print a JSON line per answer."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("upstreams", nargs="+", help="BASE_URL=MODEL")
    parser.add_argument("--record", help="write the first request and reply here (a test fixture)")
    args = parser.parse_args()
    for index, upstream in enumerate(args.upstreams):
        base_url, model = upstream.rsplit("=", 1)
        for number, (question, tool) in enumerate(QUESTIONS):
            body = request_body(model, question, tool)
            started = time.monotonic()
            reply = ask(base_url, body)
            print(json.dumps(summary(model, reply, time.monotonic() - started)), flush=True)
            if args.record and index == 0 and number == 0:
                with open(args.record, "w") as out:
                    json.dump({"request": body, "reply": reply}, out, separators=(",", ":"))
                    out.write("\n")


if __name__ == "__main__":
    main()
