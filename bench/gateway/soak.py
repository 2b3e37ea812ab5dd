"""Soak (run by hand): one `cascade serve` replica for minutes under a steady mixed load.

A private redis-server holds the policy-independent state (client keys added with
`cascade keys add`, spend counters); the scripted upstream of the tests
(tests/gateway/scripted_upstream.py) answers in process. The load mixes, per request:

* cascade, not streamed: the cheap answer is confident (accepted) or not (escalated);
* cascade, streamed (accepted answers are replayed, escalated ones relay the large model live);
* ``direct`` tier streamed in full, and streamed but aborted by the client after a few chunks;
* passthrough with ``n: 2``.

Requests carry one of four Redis keys; one has a limit the run exhausts (429s from then on). Every
``--sample-s`` seconds it records the gateway's RSS and open file descriptors; at the end it waits
until the replica has nothing left to write back and compares the spend counters in Redis with
what the upstream produced (completed answers, priced at the configured prices). Aborted streams
are reported apart: what they cost depends on how the gateway charges a stream that ends early.

    nice -n 5 .venv/bin/python bench/gateway/soak.py --minutes 10 --concurrency 4 \\
        --out bench/gateway/results/soak.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import openai  # noqa: E402

from tests.reliability.processes import (  # noqa: E402
    NANO_PER_USD,
    RedisServer,
    key_id,
    true_cost_usd,
    write_gateway_config,
)
from tests.support.gateway_process import GatewayProcess  # noqa: E402
from tests.support.policy_files import write_policy  # noqa: E402
from tests.support.scripted_upstream import Produced, ScriptedUpstream, ok  # noqa: E402

MESSAGES = [{"role": "user", "content": "Name the capital of France and one fact about it."}]
LONG = " ".join(f"word{i}" for i in range(40))  # 40 streamed chunks
KINDS = {  # kind -> share of the load
    "cascade": 0.40,
    "cascade_stream": 0.20,
    "direct_stream": 0.15,
    "stream_abort": 0.15,
    "passthrough_n2": 0.10,
}


def add_keys(redis_url: str, limits: dict[str, float]) -> dict[str, str]:
    """`cascade keys add` for each name; name -> the printed key."""
    keys = {}
    for name, limit in limits.items():
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "cascade_cli.main",
                "keys",
                "add",
                name,
                "--redis",
                redis_url,
                "--limit-usd",
                str(limit),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
        keys[name] = out.stdout.strip().split()[0]
    return keys


async def one_request(client: openai.AsyncOpenAI, kind: str, upstream: ScriptedUpstream) -> str:
    """Send one request of ``kind``; its outcome word (status or 'aborted')."""
    try:
        if kind == "cascade":
            upstream.script("up-small", ok(confidence=random.choice([0.99, 0.3]), usage=(25, 12)))
            await client.chat.completions.create(model="cascade", messages=MESSAGES, max_tokens=64)
        elif kind == "cascade_stream":
            upstream.script("up-small", ok(confidence=random.choice([0.99, 0.3]), usage=(25, 12)))
            stream = await client.chat.completions.create(
                model="cascade", messages=MESSAGES, max_tokens=64, stream=True
            )
            async for _ in stream:
                pass
        elif kind == "direct_stream":
            stream = await client.chat.completions.create(
                model="cascade/direct", messages=MESSAGES, max_tokens=64, stream=True
            )
            async for _ in stream:
                pass
        elif kind == "stream_abort":
            stream = await client.chat.completions.create(
                model="cascade/direct", messages=MESSAGES, max_tokens=64, stream=True
            )
            seen = 0
            async for _ in stream:
                seen += 1
                if seen == 3:
                    await stream.close()
                    return "aborted"
        else:
            await client.chat.completions.create(model="small", messages=MESSAGES, max_tokens=64, n=2)
        return "200"
    except openai.APIStatusError as exc:
        return str(exc.status_code)
    except openai.APIError as exc:
        return type(exc).__name__


async def load(
    replica: GatewayProcess,
    keys: list[str],
    upstream: ScriptedUpstream,
    seconds: float,
    concurrency: int,
    sample_s: float,
    samples: list[dict[str, Any]],
    outcomes: Counter[str],
) -> None:
    end = time.monotonic() + seconds
    started = time.monotonic()
    clients = [replica.async_client(k, timeout_s=30) for k in keys]
    kinds, weights = list(KINDS), list(KINDS.values())

    async def worker() -> None:
        while time.monotonic() < end:
            kind = random.choices(kinds, weights)[0]
            outcome = await one_request(random.choice(clients), kind, upstream)
            outcomes[f"{kind}:{outcome}"] += 1

    async def sampler() -> None:
        while time.monotonic() < end:
            samples.append(
                {
                    "t_s": round(time.monotonic() - started, 1),
                    "rss_mib": round(replica.rss_bytes() / 2**20, 2),
                    "fds": replica.open_fds(),
                    "requests": sum(outcomes.values()),
                }
            )
            await asyncio.sleep(sample_s)

    await asyncio.gather(sampler(), *(worker() for _ in range(concurrency)))
    for client in clients:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=None, help="write samples and summary as JSON")
    args = parser.parse_args()

    upstream = ScriptedUpstream()
    upstream.start()
    upstream.set_default("up-small", ok(usage=(25, 12)))
    upstream.set_default("up-large", ok(content=LONG, usage=(25, 40), chunk_delay_s=0.01))
    redis_server = RedisServer()
    redis_server.start()
    replica: GatewayProcess | None = None
    try:
        with tempfile.TemporaryDirectory(prefix="cascade-soak-") as tmp:
            directory = Path(tmp)
            limits = {"team-a": 1000.0, "team-b": 1000.0, "team-c": 1000.0, "tight": 0.05}
            keys = add_keys(redis_server.url, limits)
            config = write_gateway_config(
                directory,
                upstream_base_url=upstream.base_url,
                policy=write_policy(directory / "policy.json"),
                redis_url=redis_server.url,
                budgets={"window_s": 3600},
                logging={"level": "warning"},
            )
            replica = GatewayProcess(config).start().wait_ready()
            samples: list[dict[str, Any]] = []
            outcomes: Counter[str] = Counter()
            began = time.monotonic()
            asyncio.run(
                load(
                    replica,
                    list(keys.values()),
                    upstream,
                    args.minutes * 60,
                    args.concurrency,
                    args.sample_s,
                    samples,
                    outcomes,
                )
            )
            elapsed = time.monotonic() - began
            deadline = time.monotonic() + 30
            while replica.sample("cascade_spend_unsynced_usd") and time.monotonic() < deadline:
                time.sleep(0.5)
            time.sleep(1.0)
            with redis_server.client() as client:
                counters = 0
                for name in client.scan_iter(match="cascade:spend:*"):
                    text = name.decode()
                    if text.rsplit(":", 1)[-1].isdigit() and text.split(":")[2] in {
                        key_id(k) for k in keys.values()
                    }:
                        counters += int(client.get(name) or 0)
                pending = sum(int(client.hlen(n)) for n in client.scan_iter(match="cascade:spend:*:pending"))
            true_usd = true_cost_usd(list(upstream.produced))
            # Streams that ended before [DONE] (client aborts): priced at what the upstream wrote.
            cut = [s for s in upstream.streams if not s.finished]
            cut_usd = true_cost_usd(Produced(s.model, s.prompt_tokens, s.completion_tokens) for s in cut)
            summary = {
                "minutes": round(elapsed / 60, 2),
                "requests": sum(outcomes.values()),
                "requests_per_s": round(sum(outcomes.values()) / elapsed, 2),
                "outcomes": dict(sorted(outcomes.items())),
                "rss_mib_first_last_max": [
                    samples[0]["rss_mib"],
                    samples[-1]["rss_mib"],
                    max(s["rss_mib"] for s in samples),
                ],
                "fds_first_last_max": [samples[0]["fds"], samples[-1]["fds"], max(s["fds"] for s in samples)],
                "spend_counter_usd": counters / NANO_PER_USD,
                "upstream_completed_usd": round(true_usd, 9),
                "counter_minus_completed_usd": round(counters / NANO_PER_USD - true_usd, 9),
                "upstream_cut_streams": len(cut),
                "upstream_cut_streams_usd": round(cut_usd, 9),
                # Money check: never short of the true spend (completed + cut streams); the excess is
                # the documented over-charge of a cut stream's prompt (one token per request byte).
                "counter_minus_true_usd": round(counters / NANO_PER_USD - true_usd - cut_usd, 9),
                "upstream_cancelled_calls": len(upstream.cancelled),
                "pending_reservations": pending,
                "spend_fallbacks": replica.sample("cascade_spend_fallback_total", reason="timeout")
                + replica.sample("cascade_spend_fallback_total", reason="error")
                + replica.sample("cascade_spend_fallback_total", reason="down"),
            }
            print(json.dumps(summary, indent=1))
            if args.out is not None:
                args.out.write_text(json.dumps({"summary": summary, "samples": samples}, indent=1) + "\n")
    finally:
        if replica is not None:
            replica.stop()
        redis_server.stop()
        upstream.stop()


if __name__ == "__main__":
    main()
