"""The floor a Python proxy can reach: a minimal FastAPI passthrough (shared aiohttp session, orjson).

It does the least any OpenAI proxy must do: read the body, parse it, set the upstream model, send
it with a pooled keep-alive session, parse the answer and serialize it back. No auth, no metrics,
no policy. Run: ``UPSTREAM=http://127.0.0.1:PORT/v1 uvicorn bench.gateway.passthrough_app:app``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9001/v1")
session: aiohttp.ClientSession | None = None


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    global session
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), json_serialize=None)
    yield
    await session.close()


app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)


@app.post("/v1/chat/completions")
async def chat(request: Request) -> Response:
    body = orjson.loads(await request.body())
    body["model"] = "upstream"
    assert session is not None
    async with session.post(
        UPSTREAM + "/chat/completions", data=orjson.dumps(body), headers={"content-type": "application/json"}
    ) as upstream:
        answer = orjson.loads(await upstream.read())
    return Response(orjson.dumps(answer), media_type="application/json")
