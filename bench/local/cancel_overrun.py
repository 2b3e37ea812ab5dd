"""Tokens llama-server generates after a streamed request is closed: the pool's cancel overrun.

A ``prefix`` tier's rejected cheap stage is a stream the gateway closes itself after reading its
prefix, and it is charged the chunks read plus the model's declared ``cancel_overrun_tokens``
(docs/contracts.md#charges). This bench measures what llama-server really generates past the
chunks a client read before it closed the connection, for the value the manifest declares
(``localpool/models.yaml``).

It starts one pool model's server on a free port (``--model``, default ``qwen2.5-coder-0.5b``, its
pool command line and options) and, for each prefix length of ``--read`` and each of ``--trials``
word problems (``collection/data/word-problems.jsonl``, the ``qwen0.5b-steps`` member's system
message: answers of 200-300 tokens), streams the question, reads that many content chunks, closes
the connection and waits for the server's log line that ends the request (``release: ... stop
processing: n_tokens = T``, written when the slot is freed, cancelled or not): T counts the prompt
and the generated tokens the slot decoded, so the tokens generated are at most T minus the prompt's
tokens (``usage.prompt_tokens`` of the same request sent with ``max_tokens: 1``) plus one (the last
token sampled, not yet decoded), and that minus the chunks read is the overrun. One request at a
time; prints the overrun's maximum, p95 and median per prefix length and overall, and writes every
trial to ``--out``.

    CASCADE_HOME=.cascade .venv/bin/python bench/local/cancel_overrun.py \\
        --out bench/local/results/cancel-overrun.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

QUESTIONS = REPO / "collection" / "data" / "word-problems.jsonl"
MEMBER = "qwen0.5b-steps"
# The line llama-server writes for a request when its slot is released, cancelled or not.
RELEASE_LINE = re.compile(rb"release: .*task (\d+) \| stop processing: n_tokens = (\d+)")


def read_then_close(client: httpx.Client, url: str, body: dict[str, Any], read: int) -> int:
    """Stream ``body``, read ``read`` content chunks (fewer if the answer ends first), then close:
    the content chunks read."""
    chunks = 0
    with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                continue
            for choice in json.loads(line[5:]).get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    chunks += 1
            if chunks >= read:
                break  # leaving the block closes the connection, as the gateway does
    return chunks


def prompt_tokens(client: httpx.Client, url: str, body: dict[str, Any]) -> int:
    """The prompt tokens of ``body`` (its usage, sent whole with a one-token cap)."""
    whole = {**body, "stream": False, "max_tokens": 1}
    response = client.post(url, json=whole)
    response.raise_for_status()
    return int(response.json()["usage"]["prompt_tokens"])


def next_release(log: Path, offset: int, timeout_s: float = 60.0) -> tuple[int, int]:
    """(the slot's tokens, new offset) of the first slot release logged after ``offset``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        data = log.read_bytes()[offset:]
        match = RELEASE_LINE.search(data)
        if match is not None:
            return int(match.group(2)), offset + match.end()
        time.sleep(0.05)
    raise RuntimeError(f"llama-server wrote no request-ending line within {timeout_s} s ({log})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="the pool model to measure")
    parser.add_argument("--read", default="1,8,16,32", help="content chunks read before closing")
    parser.add_argument("--trials", type=int, default=10, help="questions per prefix length")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from localpool.manifest import load_manifest
    from localpool.paths import PoolPaths
    from localpool.pool import ServerOptions, server_command
    from localpool.process import start_detached, stop, wait_healthy
    from localpool.server_build import llama_server_binary
    from tests.support.ports import free_port

    manifest = load_manifest()
    spec = manifest.models[args.model].model_copy(update={"port": free_port()})
    binary = llama_server_binary()
    if binary is None:
        raise SystemExit("llama-server is not installed: run scripts/setup.sh")
    home = os.environ.get("CASCADE_HOME")
    paths = PoolPaths(Path(home) if home else REPO / ".cascade")
    system = manifest.members[MEMBER].request_defaults.system
    lines = QUESTIONS.read_text(encoding="utf-8").splitlines()
    questions = [json.loads(line)["prompt"] for line in lines[: args.trials]]
    reads = [int(item) for item in args.read.split(",")]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="cancel-overrun-") as tmp:
        log = Path(tmp) / "server.log"
        options = ServerOptions.from_env(servers=1)
        command = server_command(binary, paths.model_file(spec.file), args.model, spec, options)
        record = start_detached(command, log, Path(tmp) / "server.pid", port=spec.port)
        try:
            url = f"http://127.0.0.1:{spec.port}"
            wait_healthy(f"{url}/health", pid=record.pid, log_path=log, timeout_s=120, name=args.model)
            offset = log.stat().st_size
            with httpx.Client(timeout=300) as client:
                for read in reads:
                    for number, question in enumerate(questions):
                        body = {
                            "model": args.model,
                            "messages": [
                                {"role": "system", "content": system},
                                {"role": "user", "content": question},
                            ],
                            "max_tokens": 320,
                            "temperature": 0,
                            "stream": True,
                            "cache_prompt": False,
                        }
                        endpoint = f"{url}/v1/chat/completions"
                        prompt = prompt_tokens(client, endpoint, body)
                        _, offset = next_release(log, offset)  # the one-token request's
                        chunks = read_then_close(client, endpoint, body, read)
                        slot_tokens, offset = next_release(log, offset)
                        generated = slot_tokens - prompt + 1
                        rows.append(
                            {"read": read, "question": number, "chunks": chunks, "generated": generated}
                        )
                        print(f"  read {chunks:3d}, generated {generated:3d}, overrun {generated - chunks}")
        finally:
            stop(record.pid, grace_s=10)
    summary = []
    for read in [*reads, None]:
        picked = [r["generated"] - r["chunks"] for r in rows if read is None or r["read"] == read]
        over = np.asarray(picked)
        summary.append(
            {
                "read": "all" if read is None else read,
                "n": len(picked),
                "max": int(over.max()),
                "p95": float(np.percentile(over, 95)),
                "median": float(np.median(over)),
            }
        )
    print("\n| chunks read | trials | overrun max | p95 | median |")
    print("|---|---:|---:|---:|---:|")
    for s in summary:
        print(f"| {s['read']} | {s['n']} | {s['max']} | {s['p95']:.1f} | {s['median']:.1f} |")
    if args.out is not None:
        document = {"command": " ".join(sys.argv), "model": args.model, "summary": summary, "rows": rows}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
