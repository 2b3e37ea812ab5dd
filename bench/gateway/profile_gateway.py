"""Where the gateway's time goes: py-spy samples the gateway process under wrk load (run by hand).

Same setup as run_bench.py (nginx upstream with a real llama-server body, gateway pinned to one
CPU). Prints the functions with the most self time and inclusive time, and writes the collapsed
stacks (flamegraph input) to ``--out``. Needs ``pip install py-spy`` and root (ptrace).

    .venv/bin/python bench/gateway/profile_gateway.py --target accept --connections 64 --duration 15
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from run_bench import (
    REPO,
    body_for,
    check_paths,
    free_port,
    nginx_upstream,
    run_wrk,
    wait_http,
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
    parser.add_argument("--target", default="accept", choices=["accept", "escalate", "model"])
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--server-cpu", default="1")
    parser.add_argument("--client-cpu", default="0")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--out", type=Path, default=Path("gateway-profile.collapsed"))
    args = parser.parse_args()
    py_spy = shutil.which("py-spy") or str(REPO / ".venv" / "bin" / "py-spy")
    python = str(REPO / ".venv" / "bin" / "python")
    with tempfile.TemporaryDirectory(prefix="cascade-profile-") as name:
        tmp = Path(name)
        with nginx_upstream(tmp, args.client_cpu) as nginx_port:
            config = write_gateway_files(tmp, f"http://127.0.0.1:{nginx_port}/v1")
            port = free_port()
            env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
            env.update({"PYTHONPATH": str(REPO), "GATEWAY_CONFIG": str(config)})
            cmd = ["taskset", "-c", args.server_cpu, python, "-m", "uvicorn", "bench.gateway.gateway_app:app",
                   "--port", str(port), "--loop", "uvloop", "--http", "httptools", "--no-access-log",
                   "--log-level", "warning"]
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            try:
                base = f"http://127.0.0.1:{port}"
                wait_http(base + "/healthz")
                check_paths(base)
                url = base + "/v1/chat/completions"
                run_wrk(url, body_for(args.target), args.connections, 2, args.client_cpu)  # warm-up
                spy = subprocess.Popen(
                    [py_spy, "record", "--pid", str(proc.pid), "--rate", "500", "--format", "raw",
                     "--output", str(args.out), "--duration", str(args.duration + 1), "--nonblocking"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
                time.sleep(0.5)
                result = run_wrk(url, body_for(args.target), args.connections, args.duration, args.client_cpu)
                spy.wait(60)
                print(f"{args.target} c={args.connections}: {result['rps']:.0f} req/s, "
                      f"p50 {result['p50_us'] / 1000:.3f} ms, p99 {result['p99_us'] / 1000:.3f} ms\n")
            finally:
                proc.terminate()
                proc.wait(10)
    top(args.out, args.top)


if __name__ == "__main__":
    main()
