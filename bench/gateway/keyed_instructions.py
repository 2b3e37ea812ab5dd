"""What each kind of key limit costs the keyed path: CPU instructions, Redis commands (by hand; slow).

One ``cascade serve`` with a private Redis runs under callgrind in front of nginx (the run_bench.py
upstream); in the same process, in turn, one Redis-stored client key per row sends the accept
request (``cascade/accept``: the cheap stage scored and accepted) with wrk: a warm-up, the counters
zeroed, ``--seconds`` of wrk, the counters dumped. Every key has a USD limit that never binds:

* ``spend``: the keyed path as it was (a USD limit per fixed window);
* ``rate1``: plus one rate-limit window (requests and tokens per minute, never binding);
* ``rate3``: plus three windows (per second, minute, day);
* ``period``: a monthly budget period in Europe/Berlin instead of the fixed window;
* ``all``: three windows and a monthly period with rollover.

Under callgrind a request takes about 0.15 s, so the gateway's once-a-second background work (the
Redis health PING, the spend epoch check, the key store's periodic HLEN) is a visible share of
each row: an ``idle`` run (``--seconds`` without requests) measures it first, and each row is
also reported net of it (``net_instructions_per_request``: minus the idle rate times the row's
duration). The rows run ``--repeat`` times, interleaved, to show the spread. Redis's own command
statistics (``INFO commandstats``, before and after each run) give the Redis commands per request
by command: ``EVALSHA`` is the request path's scripts (reservation, settlement), ``HGET`` the key
lookups when a key's 5 s cache entry expired (Redis also counts the commands a script calls, under
their own names). The config's ``redis_timeout_s`` is raised to 5 s: under callgrind a Redis call
takes longer than the default 0.1 s, which would send the keyed path to its outage fallback (the
run fails if any request fell back). Run it with ``PYTHONPATH`` set
to a copy of other code to measure that code (a key whose record has fields that code does not
know is, to it, a plain ``spend`` key: then every row is the same path, and their spread is the
measurement's noise).

    PYTHONPATH=. .venv/bin/python bench/gateway/keyed_instructions.py --seconds 20 \\
        --out bench/gateway/results/keyed-instructions.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import run_bench
import yaml
from callgrind_cells import callgrind_serve, idle_window, instructions
from run_bench import REPO, body_for, nginx_upstream, redis_for, run_wrk, write_gateway_files

NEVER_BINDS = 10**12
KEYS: dict[str, dict[str, Any]] = {
    "spend": {},
    "rate1": {"rate_limits": [{"window_s": 60, "requests": NEVER_BINDS, "tokens": NEVER_BINDS}]},
    "rate3": {
        "rate_limits": [
            {"window_s": 1, "requests": NEVER_BINDS},
            {"window_s": 60, "requests": NEVER_BINDS, "tokens": NEVER_BINDS},
            {"window_s": 86400, "tokens": NEVER_BINDS},
        ]
    },
    "period": {"budget_period": {"kind": "monthly", "timezone": "Europe/Berlin"}},
    "all": {
        "rate_limits": [
            {"window_s": 1, "requests": NEVER_BINDS},
            {"window_s": 60, "requests": NEVER_BINDS, "tokens": NEVER_BINDS},
            {"window_s": 86400, "tokens": NEVER_BINDS},
        ],
        "budget_period": {"kind": "monthly", "timezone": "Europe/Berlin", "rollover_cap_usd": 1.0},
    },
}


def add_keys(redis_url: str) -> dict[str, str]:
    """One stored key per row of ``KEYS`` (default prefix: the Redis is private); name -> key."""
    import redis

    sys.path.insert(0, str(REPO))
    from gateway.keys.auth import hash_key

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    made = {}
    for name, fields in KEYS.items():
        key = f"sk-bench-{name}"
        record = {"name": name, "limit_usd": 1e9, "created_at": "2020-01-01T00:00:00+00:00", **fields}
        client.hset("cascade:keys", hash_key(key), json.dumps(record))
        made[name] = key
    client.close()
    return made


def keyed_config(tmp: Path, upstream: str, redis_url: str, body: str) -> Path:
    """The bench gateway's config (run_bench.write_gateway_files) with Redis, for keys under callgrind."""
    config = write_gateway_files(tmp, upstream, redis_url=redis_url, body=body)
    # Under callgrind a Redis reply takes far longer than the default 0.1 s bound: the keyed
    # path would fall back to counting in process (a different path), so give it 5 s.
    document = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**document, "redis_timeout_s": 5}))
    return config


def look_up_once(base: str, keys: dict[str, str]) -> None:
    """One accept request per key: every key looked up once, the first request's cost is no row's."""
    for key in keys.values():
        httpx.post(
            base + "/v1/chat/completions",
            json=body_for("accept"),
            headers={"authorization": f"Bearer {key}"},
            timeout=120,
        ).raise_for_status()


def command_calls(redis_url: str) -> dict[str, int]:
    """Calls per Redis command so far (``INFO commandstats``), e.g. {"evalsha": 12, ...}."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    changed = {name: calls - before.get(name, 0) for name, calls in after.items()}
    changed["info"] = changed.get("info", 0) - 1  # the INFO that read ``before``
    return {name: calls for name, calls in changed.items() if calls}


def fallback_count(base: str) -> float:
    """``cascade_spend_fallback_total`` of the gateway, all reasons (0: every request used Redis)."""
    text = httpx.get(base + "/metrics", timeout=60).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("cascade_spend_fallback_total")
    )


def idle(args: argparse.Namespace, pid: int, tmp: Path, redis_url: str) -> dict[str, Any]:
    """Instructions and Redis commands per second of the running gateway without requests
    (callgrind_cells.idle_window, the window every path_instructions.py row subtracts)."""
    before = command_calls(redis_url)
    row: dict[str, Any] = idle_window(pid, tmp, args.seconds)
    row["redis_commands"] = commands = delta(before, command_calls(redis_url))
    print(f"  idle     {row['instructions_per_s'] / 1e6:.3f} M instr/s, Redis {commands}", flush=True)
    return row


def one_key(
    args: argparse.Namespace,
    base: str,
    pid: int,
    tmp: Path,
    redis_url: str,
    name: str,
    key: str,
    idle_rate: float,
) -> dict:
    """Instructions and Redis commands per accept request of key ``name`` (``idle_rate``: the
    background's instructions per second, subtracted for the net figure)."""
    url = base + "/v1/chat/completions"
    request = body_for("accept")
    answer = httpx.post(url, json=request, headers={"authorization": f"Bearer {key}"}, timeout=60)
    answer.raise_for_status()
    rate_headers = sorted(h for h in answer.headers if h.startswith("x-ratelimit-"))
    run_wrk(url, request, args.connections, args.warmup, args.client_cpu, api_key=key)
    time.sleep(1)
    subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)
    before, started = command_calls(redis_url), time.monotonic()
    result = run_wrk(url, request, args.connections, args.seconds, args.client_cpu, api_key=key)
    commands = delta(before, command_calls(redis_url))
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
    seconds = time.monotonic() - started
    total = instructions(tmp, pid)
    bad = result["non_2xx"] + result["connect_errors"] + result["read_errors"] + result["timeouts"]
    if bad:
        raise RuntimeError(f"{name}: {bad} failed requests: {result}")
    fallbacks = fallback_count(base)
    if fallbacks:
        raise RuntimeError(f"{name}: {fallbacks} requests counted spend in process: not the keyed path")
    n = result["requests"]
    row = {
        "key": name,
        "requests": n,
        "seconds": seconds,
        "instructions": total,
        "instructions_per_request": total / n,
        "net_instructions_per_request": (total - idle_rate * seconds) / n,
        "redis_commands": commands,
        "redis_commands_per_request": sum(commands.values()) / n,
        "evalsha_per_request": commands.get("evalsha", 0) / n,
        "hget_per_request": commands.get("hget", 0) / n,
        "rate_limit_headers": rate_headers,
    }
    print(
        f"  {name:<8} {n} requests, {row['instructions_per_request'] / 1e6:.3f} M instr/request "
        f"({row['net_instructions_per_request'] / 1e6:.3f} M net), Redis/request: "
        f"{row['evalsha_per_request']:.2f} EVALSHA, {row['hget_per_request']:.2f} HGET, "
        f"{row['redis_commands_per_request']:.2f} in all",
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", nargs="+", choices=list(KEYS), default=list(KEYS))
    parser.add_argument("--body", default="2k", help="upstream body (run_bench.py BODIES)")
    parser.add_argument("--seconds", type=int, default=20, help="measured wrk run (slowed ~50x by callgrind)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--server-cpu", default="1")
    parser.add_argument("--client-cpu", default="0")
    parser.add_argument(
        "--redis", default="auto", help="auto: a private redis-server (the keys use prefix cascade)"
    )
    parser.add_argument("--repeat", type=int, default=2, help="rounds over the keys, interleaved")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    # nginx serves only the body measured (the others' fixtures may live outside the repository).
    run_bench.BODIES = {args.body: run_bench.BODIES[args.body]}
    with tempfile.TemporaryDirectory(prefix="cascade-keyed-instr-") as name:
        tmp = Path(name)
        with nginx_upstream(tmp, args.client_cpu) as nginx_port, redis_for(args, tmp) as redis_url:
            upstream = f"http://127.0.0.1:{nginx_port}/{args.body}/v1"
            config = keyed_config(tmp, upstream, redis_url, args.body)
            made = add_keys(redis_url)
            with callgrind_serve(config, tmp, args.server_cpu) as (base, pid):
                look_up_once(base, made)
                background = idle(args, pid, tmp, redis_url)
                rate = background["instructions_per_s"]
                rows = [
                    one_key(args, base, pid, tmp, redis_url, n, made[n], rate)
                    for _ in range(args.repeat)
                    for n in args.keys
                ]
    print(f"\nbody {args.body}; background {rate / 1e6:.3f} M instructions/s\n")
    print(
        "| key | round | requests | M instructions/request | net of background | EVALSHA/request "
        "| HGET/request |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for i, row in enumerate(rows):
        row["round"] = i // len(args.keys) + 1
        print(
            f"| {row['key']} | {row['round']} | {row['requests']} "
            f"| {row['instructions_per_request'] / 1e6:.3f} "
            f"| {row['net_instructions_per_request'] / 1e6:.3f} | {row['evalsha_per_request']:.2f} "
            f"| {row['hget_per_request']:.2f} |"
        )
    if args.out:
        document = {
            "command": " ".join(["bench/gateway/keyed_instructions.py", *sys.argv[1:]]),
            "pythonpath": os.environ.get("PYTHONPATH"),
            "args": {k: str(v) for k, v in vars(args).items()},
            "idle": background,
            "rows": rows,
        }
        args.out.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
