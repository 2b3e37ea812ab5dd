"""Real processes for the streaming, shutdown, deadline and malformed-answer reliability tests.

* ``StreamGateway``: ``cascade serve`` as a subprocess (its own uvicorn, signals, exit status),
  with a config written by ``write_config`` (per-token prices for every model, so a stream's cost
  depends on its tokens), client key ``KEY``, a spend limit, and the real Redis at 127.0.0.1:6379
  under a private key prefix. Its stderr (JSON lines) is kept in a file and parsed by ``logs()``.
* Money: ``Prices`` prices tokens like the gateway's config; ``spend_usd`` reads the key's Redis
  spend counters; ``true_spend_usd`` prices what the scripted upstream actually produced.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import redis
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support.gateway_process import GatewayProcess
from tests.support.policy_files import write_policy
from tests.support.scripted_upstream import ScriptedUpstream
from tests.support.shared_redis import REDIS_URL, delete_prefix

KEY = "sk-reliability-stream"
NANO_PER_USD = 1_000_000_000
MESSAGES = [{"role": "user", "content": "Tell me a long story about the capital of France."}]

# USD per million tokens (input, output): every model priced per token, the final one dearest.
PRICES: dict[str, tuple[float, float]] = {"small": (1.0, 2.0), "medium": (2.0, 4.0), "large": (10.0, 30.0)}
UPSTREAM_IDS = {"small": "up-small", "medium": "up-medium", "large": "up-large"}


def price_usd(model: str, prompt_tokens: int, completion_tokens: int) -> float:
    """What the config's price charges for one call of ``model``."""
    per_in, per_out = PRICES[model]
    return (prompt_tokens * per_in + completion_tokens * per_out) / 1e6


def write_config(
    directory: Path,
    upstream_url: str,
    *,
    limit_usd: float | None = None,
    request_timeout_s: float = 30.0,
    shutdown_grace_s: float | None = None,
    allow_degraded: bool = True,
) -> Path:
    """A gateway YAML (and its policy file) in ``directory``; returns the YAML's path."""
    name = uuid.uuid4().hex[:6]
    policy = directory / f"policy-{name}.json"  # one per config: a shared file would be hot-reloaded
    write_policy(policy, allow_degraded=allow_degraded)
    models = {
        name: {
            "base_url": upstream_url,
            "model": UPSTREAM_IDS[name],
            "timeout_s": 5,
            "max_retries": 0,
            "price": {"input_per_mtok": per_in, "output_per_mtok": per_out},
        }
        for name, (per_in, per_out) in PRICES.items()
    }
    limits: dict[str, Any] = {"request_timeout_s": request_timeout_s}
    if shutdown_grace_s is not None:
        limits["shutdown_grace_s"] = shutdown_grace_s
    document = {
        "models": models,
        "policy": policy.name,
        "redis_url": REDIS_URL,
        "budgets": {"limit_usd": limit_usd, "window_s": 86400},
        "limits": limits,
        "logging": {"level": "info"},
    }
    config = directory / f"gateway-{name}.yaml"
    config.write_text(yaml.safe_dump(document))
    return config


@dataclass
class ReadStream:
    """What a client read from one streamed response."""

    status: int
    headers: dict[str, str]
    events: list[dict[str, Any]]  # parsed ``data:`` objects
    errors: list[dict[str, Any]]  # parsed ``event: error`` data
    done: bool  # ``data: [DONE]`` arrived

    @property
    def text(self) -> str:
        """The streamed answer text (chat deltas)."""
        out = []
        for event in self.events:
            for choice in event.get("choices") or ():
                out.append((choice.get("delta") or {}).get("content") or "")
        return "".join(out)


class StreamGateway(GatewayProcess):
    """``cascade serve`` (tests/support/gateway_process.py) with the client key ``KEY`` and the real
    Redis under a private prefix, started and ready; streams read as a client reads them."""

    def __init__(self, config: Path, *, prefix: str | None = None):
        self.prefix = prefix or f"cascade-rel-{uuid.uuid4().hex[:12]}"
        env = {"CASCADE_API_KEYS": KEY, "CASCADE_REDIS_PREFIX": self.prefix}
        super().__init__(config, env=env, log_path=config.with_suffix(".log"))
        self.start().wait_ready(timeout_s=30)

    def headers(self) -> dict[str, str]:
        """The client key's authorization header."""
        return {"authorization": f"Bearer {KEY}"}

    def post(self, body: dict[str, Any], path: str = "/v1/chat/completions") -> httpx.Response:
        """A whole (non-streamed or fully read) response."""
        return httpx.post(self.url + path, json=body, headers=self.headers(), timeout=30)

    def stream(self, body: dict[str, Any], *, stop_after: int | None = None) -> ReadStream:
        """Stream ``body``; with ``stop_after``, abandon the stream (close the connection) after that
        many ``data:`` events, as a client that goes away mid-answer."""
        events: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        done = False
        with httpx.stream(
            "POST", self.url + "/v1/chat/completions", json=body, headers=self.headers(), timeout=30
        ) as response:
            if response.status_code != 200:
                response.read()
                return ReadStream(response.status_code, dict(response.headers), [], [], False)
            event_name = None
            for line in response.iter_lines():
                if line.startswith("event:"):
                    event_name = line[6:].strip()
                elif line.startswith("data:"):
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        done = True
                    elif event_name == "error":
                        errors.append(orjson.loads(payload))
                    else:
                        events.append(orjson.loads(payload))
                    event_name = None
                    if stop_after is not None and len(events) >= stop_after:
                        break  # leaving the block closes the connection mid-stream
            return ReadStream(response.status_code, dict(response.headers), events, errors, done)

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of ``/metrics`` (parsed with prometheus_client's parser)."""
        text = httpx.get(self.url + "/metrics", timeout=5).text
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def sample(self, name: str, **labels: str) -> float:
        """One sample's value (0.0 when absent)."""
        wanted = tuple(sorted(labels.items()))
        return self.samples().get((name, wanted), 0.0)

    def wait_for_requests(self, count: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """Wait until ``count`` requests have been logged (their spend is settled before the line)."""
        end = time.monotonic() + timeout_s
        while True:
            lines = self.request_logs()
            if len(lines) >= count or time.monotonic() > end:
                return lines
            time.sleep(0.05)

    def spend_usd(self) -> float:
        """The client key's spend counters in Redis (spent + still reserved), in USD."""
        client = redis.Redis.from_url(REDIS_URL)
        try:
            keys = list(client.scan_iter(match=f"{self.prefix}:spend:*", count=1000))
            # Only the counters (...:spend:<key_id>:<window_start>), not the pending reservations,
            # tombstones, write-back markers or the epoch kept beside them.
            names = [k.decode() for k in keys]
            counters = [n for n in names if n.count(":") == 3 and n.rsplit(":", 1)[1].isdigit()]
            return sum(int(client.get(k) or 0) for k in counters) / NANO_PER_USD
        finally:
            client.close()

    def close(self) -> None:
        """Stop the process (if still running) and delete its Redis keys."""
        self.stop()
        delete_prefix(self.prefix)


@contextlib.contextmanager
def gateway_process(config: Path) -> Iterator[StreamGateway]:
    """A running ``cascade serve`` for ``config``, stopped and cleaned up afterwards."""
    process = StreamGateway(config)
    try:
        yield process
    finally:
        process.close()


def true_spend_usd(upstream: ScriptedUpstream, small_calls: int, small_usage: tuple[int, int]) -> float:
    """What the upstream really produced: ``small_calls`` scored calls of ``small_usage`` tokens
    plus every recorded stream (its prompt and the tokens it wrote before it stopped)."""
    total = small_calls * price_usd("small", *small_usage)
    model_of = {v: k for k, v in UPSTREAM_IDS.items()}
    for record in upstream.streams:
        total += price_usd(model_of[record.model or ""], record.prompt_tokens, record.completion_tokens)
    return total


def prompt_bound_excess_usd(upstream: ScriptedUpstream, model: str, prompt_tokens: int) -> float:
    """How much charging ``model``'s streamed calls their prompt bound (one token per byte of the
    upstream request) exceeds charging their true ``prompt_tokens``: the estimate's documented
    margin when a stream ends before its usage arrives."""
    return sum(
        price_usd(model, len(orjson.dumps(call.body)) - prompt_tokens, 0)
        for call in upstream.calls(UPSTREAM_IDS[model])
        if call.body.get("stream")
    )


def unproduced_usd(upstream: ScriptedUpstream, model: str, cap: int) -> float:
    """What charging ``model``'s broken-off streams their worst case adds to what they produced:
    the completion tokens between each stream's ``cap`` and the tokens it wrote before it stopped
    (a stream that broke off without a usage is charged its worst case, docs/contracts.md#charges)."""
    model_id = UPSTREAM_IDS[model]
    return sum(
        price_usd(model, 0, cap - record.completion_tokens)
        for record in upstream.streams
        if record.model == model_id and not record.finished
    )
