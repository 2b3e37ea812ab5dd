"""Where the gateway's time goes: py-spy samples the gateway process under wrk load (run by hand).

Same setup as run_bench.py (nginx upstream with a real-shaped body, ``cascade serve`` pinned to
one CPU; ``--target accept_keyed`` adds a private Redis, a client key and a spend limit). Prints the
functions with the most self time and inclusive time, and writes the collapsed stacks (flamegraph
input) to ``--out``. Needs ``pip install py-spy`` and root (ptrace).

    .venv/bin/python bench/gateway/profile_gateway.py --target accept --body 2k --connections 64 --duration 15

``--learning RATE`` profiles the accept path of a gateway that samples RATE of its requests into a
JSONL traffic file (run_bench.py's accept_learning); at 1.0 the sampler's own costs stand out.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from run_bench import (
    BODIES,
    body_for,
    cascade_serve,
    check_paths,
    keyed_gateway,
    nginx_upstream,
    redis_for,
    run_wrk,
    write_gateway_files,
)


def top(collapsed: Path, count: int) -> None:
    """Self and inclusive sample shares per function from py-spy's raw (collapsed) output."""
    self_samples: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        n = int(samples)
        frames = stack.split(";")
        total += n
        self_samples[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    print(f"{total} samples\n\nself time:")
    for frame, n in self_samples.most_common(count):
        print(f"  {100 * n / total:5.1f}%  {frame}")
    print("\ninclusive time:")
    for frame, n in inclusive.most_common(count):
        print(f"  {100 * n / total:5.1f}%  {frame}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target", default="accept", choices=["accept", "escalate", "model", "accept_keyed"])
    parser.add_argument("--body", default="2k", choices=list(BODIES))
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--server-cpu", default="1")
    parser.add_argument("--client-cpu", default="0")
    parser.add_argument("--learning", type=float, default=None, help="sample this share of requests")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--out", type=Path, default=Path("gateway-profile.collapsed"))
    args = parser.parse_args()
    args.redis = "auto"
    py_spy = shutil.which("py-spy") or str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "py-spy")
    with tempfile.TemporaryDirectory(prefix="cascade-profile-") as name, contextlib.ExitStack() as stack:
        tmp = Path(name)
        nginx_port = stack.enter_context(nginx_upstream(tmp, args.client_cpu))
        upstream = f"http://127.0.0.1:{nginx_port}/{args.body}/v1"
        api_key = ""
        if args.target == "accept_keyed":
            redis_url = stack.enter_context(redis_for(args, tmp))
            base, pid, api_key = stack.enter_context(
                keyed_gateway(tmp, upstream, redis_url, args.server_cpu, args.body)
            )
        else:
            config = write_gateway_files(tmp, upstream, body=args.body, learning_rate=args.learning)
            base, pid = stack.enter_context(cascade_serve(tmp, config, args.server_cpu))
            check_paths(base)
        url = base + "/v1/chat/completions"
        run_wrk(url, body_for(args.target), args.connections, 2, args.client_cpu, api_key)  # warm-up
        spy = subprocess.Popen(
            [
                py_spy,
                "record",
                "--pid",
                str(pid),
                "--rate",
                "500",
                "--format",
                "raw",
                "--output",
                str(args.out),
                "--duration",
                str(args.duration + 1),
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.5)
        request = body_for(args.target)
        result = run_wrk(url, request, args.connections, args.duration, args.client_cpu, api_key)
        spy.wait(60)
        print(
            f"{args.target} body={args.body} c={args.connections}: {result['rps']:.0f} req/s, "
            f"p50 {result['p50_us'] / 1000:.3f} ms, p99 {result['p99_us'] / 1000:.3f} ms\n"
        )
    top(args.out, args.top)


if __name__ == "__main__":
    main()
