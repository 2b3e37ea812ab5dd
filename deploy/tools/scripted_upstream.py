"""A scripted OpenAI-compatible upstream for operations drills and deploy tests (loopback only).

It answers ``POST /v1/chat/completions`` like llama.cpp's server does (token logprobs with
``top_logprobs`` alternatives, ``usage``), instantly and deterministically: a prompt containing the
word ``hard`` gets a flat (unconfident) distribution over the alternatives, any other prompt a
peaked (confident) one, so a gateway in front of it both accepts and escalates. Also serves
``GET /v1/models`` and ``GET /health``.

    python deploy/tools/scripted_upstream.py --port 9101 --model small
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import time
from typing import Any

from aiohttp import web

_WORDS = ("The", " answer", " is", " four", ".")


def _token_logprobs(confident: bool, top_k: int) -> list[dict[str, Any]]:
    """llama.cpp-shaped ``logprobs.content``: one entry per word plus the end-of-text entry."""
    top_k = max(1, top_k)
    content = []
    for word in _WORDS:
        if confident:
            alternatives = [-0.001] + [-8.0 - i for i in range(top_k - 1)]
        else:
            alternatives = [-math.log(top_k)] * top_k
        top = [
            {"token": word if i == 0 else f"alt{i}", "logprob": lp, "bytes": None}
            for i, lp in enumerate(alternatives)
        ]
        content.append({"token": word, "logprob": alternatives[0], "bytes": None, "top_logprobs": top})
    content.append({"token": "", "logprob": 0.0, "bytes": None, "top_logprobs": []})
    return content


def _prompt_text(body: dict[str, Any]) -> str:
    messages = body.get("messages") or []
    return " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))


def make_app(model: str) -> web.Application:
    """The upstream's aiohttp application, answering as ``model``."""
    ids = itertools.count(1)

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        confident = "hard" not in _prompt_text(body).lower()
        top_k = int(body.get("top_logprobs") or 1)
        completion_id = f"chatcmpl-scripted-{next(ids)}"
        text = "".join(_WORDS)
        usage = {"prompt_tokens": 12, "completion_tokens": len(_WORDS), "total_tokens": 12 + len(_WORDS)}
        if body.get("stream"):
            logprobs = _token_logprobs(confident, top_k)[:-1] if body.get("logprobs") else None
            return await _stream(request, completion_id, text, usage, logprobs)
        choice: dict[str, Any] = {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": text},
        }
        if body.get("logprobs"):
            choice["logprobs"] = {"content": _token_logprobs(confident, top_k)}
        return web.json_response(
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [choice],
                "usage": usage,
            }
        )

    async def _stream(
        request: web.Request,
        completion_id: str,
        text: str,
        usage: dict[str, int],
        logprobs: list[dict[str, Any]] | None,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        base = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }
        for index, word in enumerate(_WORDS):
            choice: dict[str, Any] = {"index": 0, "delta": {"content": word}, "finish_reason": None}
            if logprobs is not None:  # one entry per streamed token, as llama.cpp streams them
                choice["logprobs"] = {"content": [logprobs[index]]}
            chunk = {**base, "choices": [choice]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        final = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage}
        await response.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())
        await response.write_eof()
        return response

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": model, "object": "model"}]})

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    return app


async def _serve(host: str, port: int, model: str) -> None:
    runner = web.AppRunner(make_app(model), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    print(f"scripted upstream {model} on http://{host}:{port}/v1", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    """Serve until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", default="scripted")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.host, args.port, args.model))


if __name__ == "__main__":
    main()
