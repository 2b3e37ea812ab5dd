"""Probe (run by hand): what a dead primary costs, and how a rate-limited one is retried.

A gateway (uvicorn on loopback, the code on ``PYTHONPATH``) routes the tier ``balanced`` primary
(``small``, ``max_retries: 2``) -> fallback (``large``) against an upstream on loopback that this
script serves and that records when each attempt arrives:

* outage: the primary answers 503 to everything; 15 requests, one every 0.2 s (a fixed 3 s of
  steady traffic). Prints the attempts the primary received and each request's status: without a
  circuit breaker every request tries the primary 1 + max_retries times before failing over;
* rate limit: the primary answers 429 without Retry-After to everything; 3 requests. Prints the
  delays between a request's attempts on the primary (the backoff).

Models are configured with the defaults of the code under test (a branch with ``retry`` and
``breaker`` settings uses their defaults: 0.5 s full-jitter base, breaker after 5 failed calls).

    PYTHONPATH=$PWD .venv/bin/python bench/gateway/outage_probe.py
"""

from __future__ import annotations

import asyncio
import itertools
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from gateway.api.app import create_app
from gateway.config.settings import Settings
from policies import build_policy, save_policy
from tests.support.gateway_testkit import POLICY_DOCUMENT, serve, stop

REQUESTS, SPACING_S, RATE_LIMITED_REQUESTS = 15, 0.2, 3
ANSWER = {
    "id": "probe",
    "object": "chat.completion",
    "model": "up-large",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
}


class Upstream:
    """The loopback upstream: ``primary_status`` for ``up-small``, an answer for any other model."""

    def __init__(self) -> None:
        self.primary_status = 503
        self.arrivals: list[float] = []  # monotonic instants of the primary's attempts
        self.port = 0

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("model") == "up-small":
            self.arrivals.append(time.monotonic())
            return web.json_response({"error": {"message": "down"}}, status=self.primary_status)
        return web.json_response(ANSWER)

    def start(self) -> None:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            app = web.Application()
            app.router.add_post("/v1/chat/completions", self._handle)
            runner = web.AppRunner(app, access_log=None)
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            loop.run_forever()

        threading.Thread(target=run, daemon=True).start()
        ready.wait(10)


def _settings(upstream: Upstream, directory: Path) -> Settings:
    base = f"http://127.0.0.1:{upstream.port}/v1"
    models: dict[str, Any] = {
        name: {"base_url": base, "model": f"up-{name}", "timeout_s": 2, "max_retries": n, "price": price}
        for name, n, price in (
            ("small", 2, {"input_per_mtok": 0.1, "output_per_mtok": 0.2}),
            ("medium", 1, {"per_query_usd": 0.0001}),
            ("large", 1, {"per_query_usd": 0.001}),
        )
    }
    policy = directory / "policy.json"
    save_policy(build_policy(POLICY_DOCUMENT), policy)
    return Settings.from_mapping(
        {
            "models": models,
            "policy": str(policy),
            "auth": {"open": True, "api_keys_env": None},
            "logging": {"level": "error"},
        }
    )


def _ask(url: str) -> int:
    body = {"model": "cascade", "messages": [{"role": "user", "content": "What is the capital of France?"}]}
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=30).status_code


def main() -> None:
    upstream = Upstream()
    upstream.start()
    with tempfile.TemporaryDirectory() as directory:
        running = serve(create_app(_settings(upstream, Path(directory))))
        try:
            statuses = []
            for _ in range(REQUESTS):
                started = time.monotonic()
                statuses.append(_ask(running.url))
                time.sleep(max(0.0, SPACING_S - (time.monotonic() - started)))
            print(f"outage: {len(upstream.arrivals)} attempts on the dead primary for {REQUESTS} requests")
            print(f"  statuses: {statuses}")
        finally:
            stop(running)
        upstream.primary_status, upstream.arrivals = 429, []
        running = serve(create_app(_settings(upstream, Path(directory))))
        try:
            for _ in range(RATE_LIMITED_REQUESTS):
                before = len(upstream.arrivals)
                status = _ask(running.url)
                times = upstream.arrivals[before:]
                gaps = [round((b - a) * 1000) for a, b in itertools.pairwise(times)]
                print(f"rate limit: HTTP {status}, {len(times)} attempts, delays between them (ms): {gaps}")
        finally:
            stop(running)


if __name__ == "__main__":
    main()
