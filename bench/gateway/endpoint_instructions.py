"""What a translated API costs the accept path, in CPU instructions (run by hand; slow).

Wall-clock req/s on a shared machine drifts by more than the 10% this is meant to resolve;
instructions executed under valgrind's callgrind do not (see learning_instructions.py). One
``cascade serve`` runs under callgrind in front of nginx (the run_bench.py upstream); for each API
in ``--endpoints`` (chat first, the reference), in the same process and in turn: a warm-up, the
counters zeroed, wrk with ``--connections`` clients for ``--seconds``, the counters dumped. The
request is the accept path of each API (``cascade/accept``: the cheap stage scored and accepted,
one upstream call). Reported: instructions per request and, since a single worker at 64 clients
is CPU-bound, the req/s each API can reach relative to chat (chat's instructions per request over
the API's).

    .venv/bin/python bench/gateway/endpoint_instructions.py --endpoints chat responses messages \\
        --out bench/gateway/results/endpoint-instructions.json

``--console on`` serves with the operator console enabled (each request's decision record: in the
process's ring, or with ``--redis-url`` in the capped Redis stream), to measure what recording costs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from callgrind_cells import callgrind_serve, counted_wrk
from run_bench import (
    ENDPOINTS,
    body_for,
    check_endpoint,
    check_paths,
    nginx_upstream,
    write_gateway_files,
)

PATHS = {"chat": "/v1/chat/completions", **{api: path for api, (path, _) in ENDPOINTS.items()}}


def one_endpoint(args: argparse.Namespace, base: str, pid: int, out_dir: Path, api: str) -> dict[str, Any]:
    """Instructions per accept request through ``api`` on the running gateway."""
    url = base + PATHS[api]
    request = body_for("accept" if api == "chat" else f"accept_{api}")
    result, total = counted_wrk(url, request, pid, out_dir, args)
    row = {"endpoint": api, "requests": result["requests"], "instructions": total}
    row["instructions_per_request"] = total / result["requests"]
    per_request = row["instructions_per_request"] / 1e6
    print(f"  {api:<10} {result['requests']} requests, {per_request:.3f} M instr/request", flush=True)
    return row


def with_console(config: Path) -> None:
    """Enable the operator console in the gateway config at ``config``."""
    import yaml

    document = yaml.safe_load(config.read_text())
    document["console"] = {"enabled": True}
    config.write_text(yaml.safe_dump(document))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--endpoints", nargs="+", choices=list(PATHS), default=["chat", "responses"])
    parser.add_argument("--body", default="2k", help="upstream body (run_bench.py BODIES)")
    parser.add_argument("--seconds", type=int, default=30, help="measured wrk run (slowed ~50x by callgrind)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--server-cpu", default="1")
    parser.add_argument("--client-cpu", default="0")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--redis-url", help="serve with this redis_url (keys, spend, console records)")
    parser.add_argument("--console", choices=["off", "on"], default="off", help="console.enabled")
    args = parser.parse_args()
    apis = ["chat", *(a for a in args.endpoints if a != "chat")]
    with tempfile.TemporaryDirectory(prefix="cascade-endpoint-instr-") as name:
        tmp = Path(name)
        with nginx_upstream(tmp, args.client_cpu) as nginx_port:
            upstream = f"http://127.0.0.1:{nginx_port}/{args.body}/v1"
            config = write_gateway_files(tmp, upstream, redis_url=args.redis_url, body=args.body)
            if args.console == "on":
                with_console(config)
            with callgrind_serve(config, tmp, args.server_cpu) as (base, pid):
                check_paths(base)
                for api in apis[1:]:
                    check_endpoint(base, api)
                rows = [one_endpoint(args, base, pid, tmp, api) for api in apis]
    chat = rows[0]["instructions_per_request"]
    for row in rows:
        row["instructions_vs_chat"] = row["instructions_per_request"] / chat
        row["cpu_bound_rps_vs_chat"] = chat / row["instructions_per_request"]
    print(f"\nbody {args.body}\n")
    print("| endpoint | requests | M instructions/request | vs chat | CPU-bound req/s vs chat |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['endpoint']} | {row['requests']} | {row['instructions_per_request'] / 1e6:.3f} "
            f"| {row['instructions_vs_chat']:.3f} | {row['cpu_bound_rps_vs_chat']:.3f} |"
        )
    if args.out:
        document = {
            "command": " ".join(["bench/gateway/endpoint_instructions.py", *sys.argv[1:]]),
            "args": {k: str(v) for k, v in vars(args).items()},
            "rows": rows,
        }
        args.out.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
