"""The probe's questions through a real gateway in front of llama-server models that write calls as
content (docs/tool-calls.md): what the openai SDK gets, the score and the route of each answer.

Usage: ``python scripts/tool_calls_through_gateway.py CHEAP_URL=MODEL FINAL_URL=MODEL``, e.g.
``http://127.0.0.1:9102/v1=qwen2.5-coder-0.5b http://127.0.0.1:9103/v1=qwen2.5-coder-1.5b``. Starts
the gateway in process on a free loopback port with both models configured ``tool_calls: content``
and a one-tier policy (cheap -> final, threshold 0.5 on ``mean_token_negentropy``, top 5), asks the
three questions of ``probe_tool_calls.py`` (non-streamed), the second again streamed, and one
``json_schema`` question; prints a JSON line per answer and the escalation and invalid-answer
counters at the end. Run from the repository root (``PYTHONPATH=.``).
"""

from __future__ import annotations

import json
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from openai import OpenAI

from gateway.api.app import create_app
from gateway.config.settings import Settings
from policies import build_policy, save_policy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_tool_calls import QUESTIONS

TOOLS: list[tuple[str, Any]] = list(QUESTIONS)
MODEL_STATS = {"mean_cost_usd": 0.0001, "quality": 0.5}
POLICY: dict[str, Any] = {
    "schema_version": 1,
    "scorer": {"name": "mean_token_negentropy", "top_k": 5},
    "models": {"cheap": MODEL_STATS, "final": {**MODEL_STATS, "quality": 0.6}},
    "default_tier": "balanced",
    "tiers": {
        "balanced": {
            "objective": {"max_cost_usd": 0.001},
            "routes": [{"weight": 1.0, "models": ["cheap", "final"], "thresholds": [0.5]}],
            "expected": {"cost_usd": 0.0002, "quality": 0.55, "escalation_rate": 0.5},
        }
    },
    "envelope": [
        {"cost_usd": 0.0001, "quality": 0.5, "models": ["cheap"], "thresholds": [], "escalation_rate": 0},
    ],
    "on_missing_score": "escalate",
    "allow_degraded": True,
}
SCHEMA: Any = {
    "type": "json_schema",
    "json_schema": {
        "name": "area",
        "schema": {"type": "object", "properties": {"area": {"type": "number"}}, "required": ["area"]},
    },
}


def _model(upstream: str) -> dict[str, Any]:
    base_url, model = upstream.rsplit("=", 1)
    return {
        "base_url": base_url,
        "model": model,
        "timeout_s": 300,
        "max_retries": 0,
        "price": {"per_query_usd": 0},
        "capabilities": {"tool_calls": "content"},
    }


def _serve(settings: Settings) -> tuple[uvicorn.Server, threading.Thread, str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(settings), log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{sock.getsockname()[1]}"


def _print(what: str, raw: Any, started: float) -> None:
    choice = raw.parse().choices[0]
    calls = [(call.function.name, call.function.arguments) for call in choice.message.tool_calls or []]
    headers = raw.headers
    print(
        json.dumps(
            {
                "request": what,
                "seconds": round(time.monotonic() - started, 1),
                "finish_reason": choice.finish_reason,
                "content": choice.message.content,
                "tool_calls": calls,
                "score": headers["x-cascade-score"],
                "models_called": headers["x-cascade-models-called"],
                "escalation_reason": headers["x-cascade-escalation-reason"],
            }
        ),
        flush=True,
    )


def main() -> None:
    """Serve, ask, print (see the module docstring)."""
    cheap, final = sys.argv[1:3]
    with tempfile.TemporaryDirectory() as tmp:
        policy = Path(tmp) / "policy.json"
        save_policy(build_policy(POLICY), policy)
        settings = Settings.from_mapping(
            {
                "models": {"cheap": _model(cheap), "final": _model(final)},
                "policy": str(policy),
                "auth": {"open": True},
                "logging": {"level": "warning"},
                "limits": {"request_timeout_s": 600},
            }
        )
        server, thread, url = _serve(settings)
        client = OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
        ask: Any = {"model": "cascade", "temperature": 0, "max_tokens": 128}
        try:
            for question, tool in TOOLS:
                started = time.monotonic()
                messages: Any = [{"role": "user", "content": question}]
                raw = client.chat.completions.with_raw_response.create(messages=messages, tools=[tool], **ask)
                _print(tool["function"]["name"], raw, started)
            question, tool = TOOLS[1]
            messages = [{"role": "user", "content": question}]
            with client.chat.completions.stream(messages=messages, tools=[tool], **ask) as stream:
                streamed = stream.get_final_completion().choices[0]
            calls = [(c.function.name, c.function.arguments) for c in streamed.message.tool_calls or []]
            print(
                json.dumps(
                    {"request": "streamed", "finish_reason": streamed.finish_reason, "tool_calls": calls}
                )
            )
            started = time.monotonic()
            messages = [
                {"role": "user", "content": "Area of a triangle with base 10 and height 5? Answer in JSON."}
            ]
            raw = client.chat.completions.with_raw_response.create(
                messages=messages, response_format=SCHEMA, **ask
            )
            _print("json_schema", raw, started)
            text = httpx.get(url + "/metrics", timeout=5).text
            counted = [
                line
                for line in text.splitlines()
                if line.startswith(("cascade_escalation_reasons_total", "cascade_invalid_answers_total"))
            ]
            print(json.dumps({"counters": counted}))
        finally:
            server.should_exit = True
            thread.join(30)


if __name__ == "__main__":
    main()
