"""How fast the console's Requests pages answer once the gateway has served 10^6 requests (run by hand).

Seeds the console's Redis stream (real Redis, a private key prefix, deleted at the end) with
``--served`` synthetic records through the store's own write script (``WRITE_SCRIPT``, the one the
request path queues), so the stream and its index are capped at ``--cap`` exactly as they would be
after that many requests; then serves the gateway (``create_app`` under uvicorn on loopback, console
enabled, the admin key set) and times each page ``--repeat`` times from a client on the same host:
the list (newest, a common filter, a rare one, one matching nothing: the scan budget's worst case,
a deep page) and one request by id (the newest, the oldest kept, one trimmed away). Server time is
the client's wall time of the whole response over loopback.

    .venv/bin/python bench/gateway/console_pages.py --served 1000000 --cap 100000 --repeat 20
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import redis
import uvicorn
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from run_bench import write_gateway_files  # noqa: E402

from gateway.records.stream_store import WRITE_SCRIPT, write_args  # noqa: E402
from gateway.redis.keys import RedisKeys  # noqa: E402

ADMIN_KEY = "bench-console-admin"
REASONS = ["low_score"] * 30 + ["none"] * 68 + ["upstream_error", "low_score,upstream_error"]


def synthetic_record(n: int, start: float) -> dict[str, Any]:
    """Record ``n`` shaped as the gateway writes one (two stages, the headers sent)."""
    reason = REASONS[n % len(REASONS)]
    escalated = reason != "none"
    request_id = f"{n:012x}{uuid.uuid4().hex[:12]}"
    stage = {
        "stage": 0, "model": "small", "attempts": 1, "billed_attempts": 1, "retries": 0,
        "prompt_tokens": 120, "completion_tokens": 40, "cost_usd": 0.0001, "bound_usd": 0.0,
        "latency_ms": 180.5, "score": 0.31 if escalated else 0.93, "threshold": 0.5,
        "decision": "escalated" if escalated else "accepted", "reason": reason if escalated else None,
    }  # fmt: skip
    stages = [stage] + (
        [{**stage, "stage": 1, "model": "large", "score": None, "decision": "answered"}] if escalated else []
    )
    headers = [["x-request-id", request_id], ["x-cascade-tier", "best" if n % 2 else "fast"]]
    headers += [
        [f"x-cascade-{name}", "value"] for name in ("policy", "model", "models-called", "escalated", "score")
    ]
    return {
        "id": request_id, "time": start + n / 1000, "api": "chat", "path": "/v1/chat/completions",
        "status": 200, "tier": "best" if n % 2 else "fast", "kind": "text", "key_id": f"{n % 50:016x}",
        "outcome": "escalated" if escalated else "accepted", "reason": reason, "duration_ms": 420.0,
        "first_byte_ms": None, "model_requested": "cascade", "stream": False, "headers": headers,
        "policy_id": "0123456789abcdef", "mechanism": "cascade", "router_probability": None,
        "route": ["small", "large"], "answered_by": "large" if escalated else "small", "escalated": escalated,
        "escalation_reasons": reason.split(",") if escalated else [], "degraded": False,
        "within_budget": True, "answer_problem": None, "failures": [], "score": stage["score"],
        "threshold": 0.5, "upstream_ms": 400.0, "stages": stages,
        "charge": {"cost_usd": 0.0011, "bound_usd": 0.0, "billed_usd": 0.0011, "reserved_usd": 0.004,
                   "prompt_tokens": 240, "completion_tokens": 80, "tokens_unknown": False},
    }  # fmt: skip


def seed(client: redis.Redis, keys: RedisKeys, served: int, cap: int) -> list[str]:
    """Write ``served`` records through ``WRITE_SCRIPT``; the ids of the first and last ``cap``."""
    sha = client.script_load(WRITE_SCRIPT.text)
    start, ids = time.time() - served / 1000, []
    began = time.perf_counter()
    for first in range(0, served, 2000):
        pipe = client.pipeline(transaction=False)
        for n in range(first, min(served, first + 2000)):
            record = synthetic_record(n, start)
            ids.append(record["id"])
            args = write_args(cap, record["id"], record, orjson.dumps(record))
            pipe.evalsha(sha, 2, keys.console_requests, keys.console_index, *args)
        pipe.execute()
    took = time.perf_counter() - began
    kept, indexed = client.xlen(keys.console_requests), client.zcard(keys.console_index)
    size = client.memory_usage(keys.console_requests) or 0
    print(
        f"seeded {served:,} records in {took:.1f} s: stream {kept:,} entries, index {indexed:,}, {size:,} B"
    )
    return ids


def serve(config: Path) -> tuple[uvicorn.Server, threading.Thread, str]:
    """The gateway of ``config`` under uvicorn on a free loopback port."""
    from gateway.api.app import create_app
    from gateway.config.settings import Settings

    app = create_app(Settings.from_yaml(config))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{port}"


def time_pages(base: str, pages: dict[str, str], repeat: int) -> list[dict[str, Any]]:
    """Each page fetched ``repeat`` times (after one warm-up): its status, size and times in ms."""
    rows = []
    with httpx.Client(base_url=base, headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=60) as http:
        for name, path in pages.items():
            http.get(path)
            times, status, size = [], 0, 0
            for _ in range(repeat):
                began = time.perf_counter()
                answer = http.get(path)
                times.append((time.perf_counter() - began) * 1000)
                status, size = answer.status_code, len(answer.content)
            rows.append({"page": name, "path": path, "status": status, "bytes": size,
                         "median_ms": statistics.median(times), "max_ms": max(times)})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--served", type=int, default=1_000_000, help="requests served (records written)")
    parser.add_argument("--cap", type=int, default=100_000, help="console.max_records")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    keys = RedisKeys(f"bench-console-{uuid.uuid4().hex[:8]}")
    os.environ.update(CASCADE_REDIS_PREFIX=keys.prefix, CASCADE_ADMIN_KEY=ADMIN_KEY)
    client = redis.Redis.from_url(args.redis_url)
    try:
        ids = seed(client, keys, args.served, args.cap)
        with tempfile.TemporaryDirectory(prefix="console-pages-") as tmp:
            config = write_gateway_files(
                Path(tmp), "http://127.0.0.1:9/v1", redis_url=args.redis_url, body="2k"
            )
            document = yaml.safe_load(config.read_text())
            document["console"] = {"enabled": True, "max_records": args.cap}
            document["logging"] = {"level": "warning"}
            config.write_text(yaml.safe_dump(document))
            server, thread, base = serve(config)
            deep = client.xrevrange(keys.console_requests, count=5001)[-1][0].decode()
            pages = {
                "Requests (newest 50)": "/console/requests",
                "Requests, tier=best (1 in 2)": "/console/requests?tier=best",
                "Requests, reason=upstream_error (1 in 50)": "/console/requests?reason=upstream_error",
                "Requests, key matching none (scan budget)": "/console/requests?key=none-such",
                "Requests, 100th page (cursor)": f"/console/requests?cursor={deep}",
                "Request, newest": f"/console/requests/{ids[-1]}",
                "Request, oldest kept": f"/console/requests/{ids[-args.cap]}",
                "Request, trimmed (404)": f"/console/requests/{ids[0]}",
            }
            rows = time_pages(base, pages, args.repeat)
            server.should_exit = True
            thread.join(15)
    finally:
        for key in (keys.console_requests, keys.console_index):
            client.delete(key)
        client.close()
    print(f"\n{args.served:,} requests served, {args.cap:,} kept, {args.repeat} fetches per page\n")
    print("| page | status | KB | median ms | max ms |\n|---|---:|---:|---:|---:|")
    for row in rows:
        size = row["bytes"] / 1024
        print(
            f"| {row['page']} | {row['status']} | {size:.0f} | {row['median_ms']:.1f} | {row['max_ms']:.1f} |"
        )


if __name__ == "__main__":
    main()
