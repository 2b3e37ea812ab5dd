"""What an upstream billed next to what a key was charged, fault by fault, through `cascade serve`.

Each scenario runs the real gateway process (one replica) against a private `redis-server` and the
scripted upstream of the tests (tests/support/scripted_upstream.py), which keeps what a provider
bills whatever the client did (``ScriptedUpstream.billed``: a non-streamed answer it was asked for
is billed even when the client timed out, the body was cut or the connection dropped). Prices are
the test models' (USD per million prompt / completion tokens: small 0.5 / 1, large 10 / 30). A
scenario prints the USD billed (priced ``billed``), the key's Redis spend counter after every
request settled (charged), the key's limit, the upstream calls and the HTTP statuses (with the error
code of an error):

* ``timeout_*``: ``timeout_s: 2`` and an upstream answering after 4 s (six requests; passthrough on
  chat and Responses, and the cheap stage of a cascade whose escalation answers);
* ``cut_body``: a 200 whose body is cut half-way (the connection closed), ``max_retries: 2``;
* ``images``: 500 image URLs per request, billed 1,600 prompt tokens each, ten concurrent requests
  on a $10 key (``--declare-images``: the model declares ``part_tokens.image: 1600``);
* ``audio_url``: 300 ``audio_url`` parts per request (a part type vLLM takes), billed 1,500 prompt
  tokens each, ten concurrent requests on a $5 key (a part type the gateway prices at no declared
  bound is refused, docs/contracts.md#content-parts);
* ``uncapped_*``: an upstream that writes 20,000 tokens when no cap is sent (and honours a cap),
  twelve concurrent requests without a cap on a $2 key, on chat and Responses.

The invariants: charged >= billed, and billed <= limit + one request's worst case.

    .venv/bin/python bench/gateway/billed_vs_charged.py [--declare-images] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "reliability")]

from processes import (  # noqa: E402
    NANO_PER_USD,
    PRICES,
    RedisServer,
    model_configs,
    spend_counter_nano,
    true_cost_usd,
    write_gateway_config,
)

from tests.support.gateway_process import GatewayProcess  # noqa: E402
from tests.support.policy_files import write_policy  # noqa: E402
from tests.support.scripted_upstream import ScriptedUpstream, ok  # noqa: E402

KEY = "sk-billed-vs-charged"
QUESTION = "What is the capital of France?"


@dataclass
class Scenario:
    """One measured case: the config changes, the upstream's replies, the requests."""

    name: str
    limit_usd: float
    script: Callable[[ScriptedUpstream], None]
    requests: list[tuple[str, dict[str, Any]]]
    concurrent: bool = False
    models: Callable[[dict[str, Any]], None] = lambda models: None
    extra: dict[str, Any] = field(default_factory=dict)


def chat(model: str = "large", **fields: Any) -> tuple[str, dict[str, Any]]:
    messages = [{"role": "user", "content": QUESTION}]
    return "/v1/chat/completions", {"model": model, "messages": messages, **fields}


def responses(model: str = "large", **fields: Any) -> tuple[str, dict[str, Any]]:
    return "/v1/responses", {"model": model, "input": QUESTION, **fields}


def images(count: int) -> tuple[str, dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": "Which of these show a cat?"}]
    parts += [{"type": "image_url", "image_url": {"url": f"https://i.example/{i}.png"}} for i in range(count)]
    return "/v1/chat/completions", {
        "model": "large",
        "messages": [{"role": "user", "content": parts}],
        "max_tokens": 16,
    }


def audio_urls(count: int) -> tuple[str, dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": "Transcribe these."}]
    parts += [{"type": "audio_url", "audio_url": {"url": f"https://a.example/{i}.wav"}} for i in range(count)]
    return "/v1/chat/completions", {
        "model": "large",
        "messages": [{"role": "user", "content": parts}],
        "max_tokens": 16,
    }


def set_models(**changes: Any) -> Callable[[dict[str, Any]], None]:
    def apply(models: dict[str, Any]) -> None:
        for config in models.values():
            config.update(changes)

    return apply


def scenarios(declare_images: bool) -> list[Scenario]:
    slow = ok(usage=(20, 3000), delay_s=4.0, honour_cap=True)
    cut = ok(usage=(20, 3000), cut_body_at=40, honour_cap=True)
    long_answer = ok(usage=(20, 20_000), honour_cap=True)
    image_models = set_models(part_tokens={"image": 1600}) if declare_images else set_models()
    return [
        Scenario(
            "timeout_chat",
            1.0,
            lambda u: u.set_default("up-large", slow),
            [chat(max_tokens=3000)] * 6,
            models=set_models(timeout_s=2),
        ),
        Scenario(
            "timeout_responses",
            1.0,
            lambda u: u.set_default("up-large", slow),
            [responses(max_output_tokens=3000)] * 6,
            models=set_models(timeout_s=2),
        ),
        Scenario(
            "timeout_cheap_stage",
            1.0,
            lambda u: (u.set_default("up-small", slow), u.set_default("up-large", ok(usage=(20, 10)))),
            [chat("cascade", max_tokens=3000)] * 6,
            models=set_models(timeout_s=2),
        ),
        Scenario(
            "cut_body",
            1.0,
            lambda u: u.set_default("up-large", cut),
            [chat(max_tokens=3000)] * 3,
            models=set_models(max_retries=2),
        ),
        Scenario(
            "images",
            10.0,
            lambda u: u.set_default("up-large", ok(usage=(20, 16), image_tokens=1600, honour_cap=True)),
            [images(500)] * 10,
            concurrent=True,
            models=image_models,
        ),
        Scenario(
            "audio_url",
            5.0,
            lambda u: u.set_default(
                "up-large", ok(usage=(20, 16), part_tokens={"audio_url": 1500}, honour_cap=True)
            ),
            [audio_urls(300)] * 10,
            concurrent=True,
            models=image_models,
        ),
        Scenario(
            "uncapped_chat",
            2.0,
            lambda u: u.set_default("up-large", long_answer),
            [chat()] * 12,
            concurrent=True,
        ),
        Scenario(
            "uncapped_responses",
            2.0,
            lambda u: u.set_default("up-large", long_answer),
            [responses()] * 12,
            concurrent=True,
        ),
    ]


async def post(url: str, path: str, body: dict[str, Any]) -> str:
    """The answer's status, with its error code when it is an OpenAI-shaped error."""
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.post(url + path, json=body, headers={"authorization": f"Bearer {KEY}"})
    if response.status_code < 400:
        return str(response.status_code)
    try:
        code = response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        code = None
    return f"{response.status_code} {code}" if code else str(response.status_code)


async def send_all(url: str, scenario: Scenario) -> list[str]:
    if scenario.concurrent:
        return list(await asyncio.gather(*(post(url, p, b) for p, b in scenario.requests)))
    return [await post(url, p, b) for p, b in scenario.requests]


def pending(redis_server: RedisServer) -> int:
    with redis_server.client() as client:
        return sum(int(client.hlen(name)) for name in client.scan_iter(match="cascade:spend:*:pending"))


def run(scenario: Scenario, upstream: ScriptedUpstream, directory: Path) -> dict[str, Any]:
    upstream.reset()
    scenario.script(upstream)
    models = model_configs(upstream.base_url)
    scenario.models(models)
    redis_server = RedisServer()
    redis_server.start()
    replica: GatewayProcess | None = None
    try:
        config = write_gateway_config(
            directory,
            upstream_base_url=upstream.base_url,
            policy=write_policy(directory / "policy.json"),
            redis_url=redis_server.url,
            name=f"{scenario.name}.yaml",
            models=models,
            budgets={"limit_usd": scenario.limit_usd},
            redis_timeout_s=1.0,
        )
        replica = GatewayProcess(config, env={"CASCADE_API_KEYS": KEY}).start()
        replica.wait_ready()
        statuses = asyncio.run(send_all(replica.url, scenario))
        deadline = time.monotonic() + 15
        while pending(redis_server) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # the upstream's records of connections closed late
        with redis_server.client() as client:
            charged = spend_counter_nano(client, KEY) / NANO_PER_USD
    finally:
        if replica is not None:
            replica.stop()
        redis_server.stop()
    billed = true_cost_usd(list(upstream.billed))
    return {
        "scenario": scenario.name,
        "billed_usd": round(billed, 4),
        "charged_usd": round(charged, 4),
        "limit_usd": scenario.limit_usd,
        "upstream_calls": len(upstream.requests),
        "statuses": {s: statuses.count(s) for s in sorted(set(statuses))},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--declare-images", action="store_true", help="models declare part_tokens.image")
    parser.add_argument("--only", nargs="*", help="scenario names to run")
    args = parser.parse_args()
    upstream = ScriptedUpstream()
    upstream.start()
    assert PRICES["large"] == (10.0, 30.0)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for scenario in scenarios(args.declare_images):
                if args.only and scenario.name not in args.only:
                    continue
                print(run(scenario, upstream, Path(tmp)), flush=True)
    finally:
        upstream.stop()


if __name__ == "__main__":
    main()
