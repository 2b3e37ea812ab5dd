"""Time to first token and whole answer, streamed: buffer tier, prefix tier, each model alone.

Starts the pool's two Qwen servers (``qwen2.5-coder-0.5b``, ``qwen2.5-coder-1.5b``) on free ports and
``cascade serve`` in front of them with ``--policy`` (its tiers ``--buffer-tier`` and
``--prefix-tier``, both ``qwen0.5b-think -> qwen1.5b-think``, the second with a ``prefix`` commit
rule), then streams every question, one request at a time, to four arms in a rotating order:

* ``cheap``: straight to the 0.5B server, as the gateway sends the ``qwen0.5b-think`` member (its
  system message and cap);
* ``final``: straight to the 1.5B server, as ``qwen1.5b-think``;
* ``buffer``: through the gateway, ``model: cascade/<buffer tier>`` (the whole cheap answer is
  scored before the first byte);
* ``prefix``: through the gateway, ``model: cascade/<prefix tier>``.

Every request is streamed with ``temperature: 0`` and ``cache_prompt: false`` (llama-server's prompt
cache off; the gateway forwards the field), so each one evaluates its whole prompt. Time to first
token: from sending the request to the first chunk with non-empty ``delta.content``; whole answer:
to ``[DONE]``. Gateway arms are split by outcome (``x-cascade-escalated``: the decision is made
before the first byte). Prints p50/p95 per arm and outcome and writes every request to ``--out``.

    CASCADE_HOME=.cascade .venv/bin/python bench/local/prefix_ttft.py \\
        --policy bench/local/prefix-ttft-test-policy.json --out bench/local/results/prefix-ttft.json

``--prompts FILE`` (a prompt set's JSONL, ``prompt`` field) replaces the bench's questions
(``bench/local/prefix-ttft-questions.jsonl``).
``--write-test-policy`` rewrites the hand-written test policy (not calibrated: its threshold was
set by hand so that both outcomes occur on the built-in questions) and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

CHEAP, FINAL = "qwen0.5b-think", "qwen1.5b-think"
SERVERS = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
TEST_POLICY = REPO / "bench" / "local" / "prefix-ttft-test-policy.json"
ARMS = ("cheap", "final", "buffer", "prefix")
# Grade-school word problems of a few steps, written for this bench (the think members answer them
# in 80-200 tokens, one calculation per line).
QUESTIONS = REPO / "bench" / "local" / "prefix-ttft-questions.jsonl"


def test_policy_document(
    buffer_threshold: float, prefix_threshold: float, tokens: int, top_k: int
) -> dict[str, Any]:
    """The hand-written test policy: tiers ``buffer`` and ``prefix`` over the same route, each with
    its own threshold (a prefix's scores run lower than the whole answer's)."""

    def tier(threshold: float) -> dict[str, Any]:
        return {
            "objective": {"max_cost_usd": 0.00003},
            "routes": [{"weight": 1.0, "models": [CHEAP, FINAL], "thresholds": [threshold]}],
            # Placeholders, not measured: this policy is not calibrated.
            "expected": {"cost_usd": 0.00002, "quality": 0.6, "escalation_rate": 0.5},
        }

    return {
        "schema_version": 1,
        "created_at": "2026-11-28T00:00:00+00:00",
        "scorer": {"name": "mean_token_negentropy", "top_k": top_k},
        "models": {
            CHEAP: {"mean_cost_usd": 0.00001, "quality": 0.5},
            FINAL: {"mean_cost_usd": 0.00003, "quality": 0.7},
        },
        "default_tier": "prefix",
        "tiers": {
            "buffer": tier(buffer_threshold),
            "prefix": {**tier(prefix_threshold), "commit": {"rule": "prefix", "tokens": tokens}},
        },
        "envelope": [],
        "on_missing_score": "escalate",
        "allow_degraded": True,
    }


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def pool_and_gateway(policy: Path, work: Path) -> Iterator[tuple[dict[str, str], str, Any]]:
    """The two servers on free ports and ``cascade serve`` in front of them: (server URL by member,
    gateway URL, manifest)."""
    from localpool.demo_config import pool_gateway_config
    from localpool.manifest import load_manifest
    from localpool.paths import PoolPaths
    from localpool.pool import ServerOptions, base_url, server_command
    from localpool.process import start_detached, stop, wait_healthy
    from localpool.server_build import llama_server_binary

    home = os.environ.get("CASCADE_HOME")
    paths = PoolPaths(Path(home) if home else REPO / ".cascade")
    manifest = load_manifest()
    binary = llama_server_binary()
    if binary is None:
        raise SystemExit("llama-server is not installed: run scripts/setup.sh")
    models = dict(manifest.models)
    models.update({n: manifest.models[n].model_copy(update={"port": free_port()}) for n in SERVERS})
    manifest = manifest.model_copy(update={"models": models})
    options = ServerOptions.from_env(servers=len(SERVERS))
    records = []
    gateway: subprocess.Popen[bytes] | None = None
    try:
        for name in SERVERS:
            spec = models[name]
            command = server_command(binary, paths.model_file(spec.file), name, spec, options)
            records.append(
                start_detached(command, work / f"{name}.log", work / f"{name}.pid", port=spec.port)
            )
        for name, record in zip(SERVERS, records, strict=True):
            health = f"http://127.0.0.1:{models[name].port}/health"
            wait_healthy(health, pid=record.pid, log_path=work / f"{name}.log", timeout_s=300, name=name)
        config = work / "gateway.yaml"
        config.write_text(yaml.safe_dump(pool_gateway_config(manifest, [CHEAP, FINAL], policy)))
        port = free_port()
        with (work / "gateway.log").open("wb") as log:
            gateway = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "cascade_cli.main",
                    "serve",
                    "--config",
                    str(config),
                    "--port",
                    str(port),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
        url = f"http://127.0.0.1:{port}"
        wait_healthy(
            f"{url}/readyz", pid=gateway.pid, log_path=work / "gateway.log", timeout_s=120, name="gateway"
        )
        servers = {m: base_url(models[manifest.server_of(m)]) for m in (CHEAP, FINAL)}
        yield servers, url, manifest
    finally:
        if gateway is not None:
            gateway.terminate()
            gateway.wait(timeout=20)
        for record in records:
            stop(record.pid, grace_s=10)


def stream_once(client: httpx.Client, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """Stream one request: seconds to the first content token and to ``[DONE]``, tokens, outcome."""
    started = time.perf_counter()
    first: float | None = None
    tokens = 0
    facts: dict[str, Any] = {}
    with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        escalated = response.headers.get("x-cascade-escalated")
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            facts = chunk.get("cascade") or facts
            for choice in chunk.get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    tokens += 1
                    if first is None:
                        first = time.perf_counter() - started
    whole = time.perf_counter() - started
    if first is None:
        raise RuntimeError(f"no content streamed from {url}")
    outcome = None if escalated is None else ("escalated" if escalated == "true" else "accepted")
    commit = facts.get("commit") or {}
    return {
        "ttft_s": first,
        "whole_s": whole,
        "chunks": tokens,
        "outcome": outcome,
        "commit_tokens": commit.get("tokens"),
    }


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """p50/p95 of time to first token and of the whole answer per arm and outcome."""
    out = []
    for arm in ARMS:
        outcomes = [None] if arm in ("cheap", "final") else ["accepted", "escalated"]
        for outcome in outcomes:
            picked = [r for r in rows if r["arm"] == arm and r["outcome"] == outcome]
            if not picked:
                continue
            ttft = np.asarray([r["ttft_s"] for r in picked])
            whole = np.asarray([r["whole_s"] for r in picked])
            out.append(
                {
                    "arm": arm,
                    "outcome": outcome or "-",
                    "n": len(picked),
                    "ttft_p50_s": float(np.percentile(ttft, 50)),
                    "ttft_p95_s": float(np.percentile(ttft, 95)),
                    "whole_p50_s": float(np.percentile(whole, 50)),
                    "whole_p95_s": float(np.percentile(whole, 95)),
                    "chunks_p50": float(np.percentile([r["chunks"] for r in picked], 50)),
                }
            )
    return out


def print_summary(summary: list[dict[str, Any]]) -> None:
    """The summary as a markdown table, with the prefix tier's accepted first token against the others'."""
    print("\n| arm | outcome | n | first token p50 | p95 | whole answer p50 | p95 | chunks p50 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for s in summary:
        print(
            f"| {s['arm']} | {s['outcome']} | {s['n']} | {s['ttft_p50_s']:.2f} s | {s['ttft_p95_s']:.2f} s | "
            f"{s['whole_p50_s']:.2f} s | {s['whole_p95_s']:.2f} s | {s['chunks_p50']:.0f} |"
        )
    by = {(s["arm"], s["outcome"]): s for s in summary}
    prefix, buffer, cheap = (
        by.get(("prefix", "accepted")),
        by.get(("buffer", "accepted")),
        by.get(("cheap", "-")),
    )
    if prefix and buffer and cheap:
        print(
            "accepted, first token p50: buffer / prefix = "
            f"{buffer['ttft_p50_s'] / prefix['ttft_p50_s']:.1f}x, prefix / cheap model alone = "
            f"{prefix['ttft_p50_s'] / cheap['ttft_p50_s']:.1f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", type=Path, default=TEST_POLICY)
    parser.add_argument("--buffer-tier", default="buffer")
    parser.add_argument("--prefix-tier", default="prefix")
    parser.add_argument("--prompts", type=Path, default=QUESTIONS, help="JSONL with a prompt field")
    parser.add_argument("--requests", type=int, default=16, help="questions (each to every arm)")
    parser.add_argument("--skip", type=int, default=0, help="start after this many questions")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--write-test-policy", action="store_true")
    parser.add_argument(
        "--combine", type=Path, nargs="+", help="summarize the rows of these result files together (no run)"
    )
    # The medians of the cheap member's scores on this bench's questions (a pilot at top_k 10):
    # whole answers 0.918, their first 16 tokens 0.859; so that both outcomes occur on each tier.
    parser.add_argument("--buffer-threshold", type=float, default=0.918, help="--write-test-policy")
    parser.add_argument("--prefix-threshold", type=float, default=0.859, help="--write-test-policy")
    parser.add_argument("--tokens", type=int, default=16, help="--write-test-policy: the prefix length")
    parser.add_argument("--top-k", type=int, default=10, help="--write-test-policy: the scorer's top_k")
    args = parser.parse_args()

    from policies import build_policy, load_policy, save_policy

    if args.write_test_policy:
        document = test_policy_document(args.buffer_threshold, args.prefix_threshold, args.tokens, args.top_k)
        save_policy(build_policy(document), TEST_POLICY)
        print(f"wrote {TEST_POLICY}")
        return
    if args.combine:
        combined = [row for path in args.combine for row in json.loads(path.read_text())["rows"]]
        print_summary(summarize(combined))
        if args.out is not None:
            document = {"command": " ".join(sys.argv), "summary": summarize(combined), "rows": combined}
            args.out.write_text(json.dumps(document, indent=2) + "\n")
        return
    policy = load_policy(args.policy)
    lines = args.prompts.read_text(encoding="utf-8").splitlines()
    questions = [json.loads(line)["prompt"] for line in lines if line.strip()]
    questions = questions[args.skip : args.skip + args.requests]
    rows: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="prefix-ttft-") as tmp,
        pool_and_gateway(args.policy, Path(tmp)) as (
            servers,
            gateway,
            manifest,
        ),
    ):
        print(f"policy {policy.policy_id} ({args.policy}); load average {os.getloadavg()[0]:.1f}")
        cap = manifest.members[CHEAP].request_defaults.max_tokens
        with httpx.Client(timeout=900) as client:
            for number, question in enumerate(questions):
                messages = [{"role": "user", "content": question}]
                common = {"temperature": 0, "stream": True, "cache_prompt": False}
                bodies: dict[str, tuple[str, dict[str, Any]]] = {}
                for arm, member in (("cheap", CHEAP), ("final", FINAL)):
                    defaults = manifest.members[member].request_defaults
                    system = [{"role": "system", "content": defaults.system}] if defaults.system else []
                    body = {"model": manifest.server_of(member), "messages": system + messages, **common}
                    if defaults.max_tokens:
                        body["max_tokens"] = defaults.max_tokens
                    bodies[arm] = (f"{servers[member]}/chat/completions", body)
                for arm, tier in (("buffer", args.buffer_tier), ("prefix", args.prefix_tier)):
                    # The member's own cap, sent by the client: an answer that reaches it is not
                    # "cut short" (escalated whatever its score), as it would be at the member's cap.
                    body = {"model": f"cascade/{tier}", "messages": messages, "max_tokens": cap, **common}
                    bodies[arm] = (f"{gateway}/v1/chat/completions", body)
                order = ARMS[number % 4 :] + ARMS[: number % 4]  # rotate who goes first
                line = []
                for arm in order:
                    url, body = bodies[arm]
                    measured = stream_once(client, url, body)
                    rows.append({"question": args.skip + number, "arm": arm, **measured})
                    outcome = measured["outcome"][0] if measured["outcome"] else "-"
                    line.append(f"{arm} {measured['ttft_s']:.2f}/{measured['whole_s']:.2f}s {outcome}")
                print(f"  q{args.skip + number}: " + ", ".join(line))
    summary = summarize(rows)
    print_summary(summary)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        document = {
            "command": " ".join(sys.argv),
            "policy": policy.policy_id,
            "summary": summary,
            "rows": rows,
        }
        args.out.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
