"""What sampling for learning costs the accept path: paired, interleaved runs (run by hand).

Sequential 10 s runs of "learning off" then "learning on" cannot resolve a 5% difference on a
shared machine: there the speed of the same server drifts by 20% or more within minutes
(docs/benchmarks.md). This benchmark keeps three gateways alive at once, all pinned to the same
CPU and idle unless measured:

* ``off``      accept, no ``learning:`` section;
* ``off_again`` the very same config in a second process: the A/A control, which shows how far
  two identical servers differ under this method (the noise floor of the ratios below);
* ``learning`` accept with ``learning.sample_rate = --rate`` into a JSONL file store (run_bench.py's
  accept_learning).

Each of ``--pairs`` rounds runs wrk for ``--slice`` seconds against each gateway, in an order that
rotates every round, so slow drift hits all three alike. Each round gives the ratios learning/off
and off_again/off of requests per second and of server CPU per request; the medians over rounds
(and the 25th-75th percentiles) are reported, with the sampler's counters to show it did sample.

    .venv/bin/python bench/gateway/learning_cost.py --rate 0.01 --bodies 2k 25k --pairs 12 \\
        --out bench/gateway/results/learning-cost.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from run_bench import (
    body_for,
    cascade_serve,
    check_paths,
    cpu_seconds,
    learning_counters,
    nginx_upstream,
    run_wrk,
    write_gateway_files,
)

GATEWAYS = ("off", "off_again", "learning")


def one_body(args: argparse.Namespace, tmp: Path, nginx_port: int, body: str) -> dict[str, Any]:
    """Every round's wrk results per gateway, the per-round ratios and the sampler's counters."""
    upstream = f"http://127.0.0.1:{nginx_port}/{body}/v1"
    request = body_for("accept")
    off_config = write_gateway_files(tmp, upstream, body=body)
    learning_config = write_gateway_files(tmp, upstream, body=body, learning_rate=args.rate)
    configs = {"off": off_config, "off_again": off_config, "learning": learning_config}
    with contextlib.ExitStack() as stack:
        servers: dict[str, tuple[str, int]] = {}
        for name in GATEWAYS:
            servers[name] = stack.enter_context(
                cascade_serve(tmp, configs[name], args.server_cpu, log_name=f"cost-{body}-{name}")
            )
            check_paths(servers[name][0])
        urls = {name: base + "/v1/chat/completions" for name, (base, _) in servers.items()}
        for name in GATEWAYS:  # warm-up: connection pools, caches, the first samples
            run_wrk(urls[name], request, args.connections, args.warmup, args.client_cpu)
        rounds: list[dict[str, dict[str, float]]] = []
        for index in range(args.pairs):
            order = GATEWAYS[index % 3 :] + GATEWAYS[: index % 3]  # rotate: no gateway always goes first
            measured: dict[str, dict[str, float]] = {}
            for name in order:
                pid = servers[name][1]
                before = cpu_seconds(pid)
                result = run_wrk(urls[name], request, args.connections, args.slice, args.client_cpu)
                bad = (
                    result["non_2xx"] + result["connect_errors"] + result["read_errors"] + result["timeouts"]
                )
                if bad:
                    raise RuntimeError(f"{name}: {bad} failed requests: {result}")
                measured[name] = {
                    "rps": result["rps"],
                    "cpu_us_per_req": (cpu_seconds(pid) - before) / result["requests"] * 1e6,
                    "p50_ms": result["p50_us"] / 1000,
                    "p99_ms": result["p99_us"] / 1000,
                }
            rounds.append(measured)
            print(
                f"  {body} round {index + 1:>2}: "
                + "  ".join(
                    f"{n} {measured[n]['rps']:6.0f} req/s {measured[n]['cpu_us_per_req']:4.0f} us"
                    for n in GATEWAYS
                ),
                flush=True,
            )
        time.sleep(6)  # the writer flushes every 5 s: let the last samples land before counting
        counters = learning_counters(servers["learning"][0])
    return {"rounds": rounds, "summary": summarize(rounds), "learning_counters": counters}


def summarize(rounds: list[dict[str, dict[str, float]]]) -> dict[str, Any]:
    """Medians and quartiles of the per-round ratios to ``off``, and of the raw numbers."""

    def spread(values: list[float]) -> dict[str, float]:
        quartiles = statistics.quantiles(values, n=4, method="inclusive")
        return {"median": statistics.median(values), "p25": quartiles[0], "p75": quartiles[2]}

    summary: dict[str, Any] = {}
    for name in ("off_again", "learning"):
        summary[f"{name}_vs_off"] = {
            metric: spread([r[name][metric] / r["off"][metric] for r in rounds])
            for metric in ("rps", "cpu_us_per_req")
        }
    for name in GATEWAYS:
        summary[name] = {metric: spread([r[name][metric] for r in rounds]) for metric in rounds[0][name]}
    return summary


def report(body: str, result: dict[str, Any], rate: float) -> str:
    """Markdown table of one body's ratios."""
    summary = result["summary"]
    lines = [
        f"body {body}, learning at {rate:g}, {len(result['rounds'])} rounds",
        "",
        "| gateway | req/s (median) | CPU us/req (median) "
        "| req/s vs off, median [p25, p75] | CPU vs off, median [p25, p75] |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in GATEWAYS:
        raw = summary[name]
        if name == "off":
            ratios = ("1", "1")
        else:
            pair = summary[f"{name}_vs_off"]
            ratios = tuple(
                f"{pair[m]['median']:.3f} [{pair[m]['p25']:.3f}, {pair[m]['p75']:.3f}]"
                for m in ("rps", "cpu_us_per_req")
            )
        rps, cpu = raw["rps"]["median"], raw["cpu_us_per_req"]["median"]
        lines.append(f"| {name} | {rps:.0f} | {cpu:.0f} | {ratios[0]} | {ratios[1]} |")
    counters = result["learning_counters"]
    sampled = sum(v for k, v in counters.items() if k.startswith("cascade_learning_sampled_total"))
    dropped = sum(v for k, v in counters.items() if k.startswith("cascade_learning_dropped_total"))
    written = counters.get("cascade_learning_rows_written_total", 0)
    lines.append(f"\nlearning: {sampled:g} requests sampled, {dropped:g} dropped, {written:g} rows written")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rate", type=float, default=0.01, help="learning.sample_rate of the learning gateway"
    )
    parser.add_argument("--bodies", nargs="+", default=["2k", "25k"])
    parser.add_argument("--pairs", type=int, default=12, help="rounds (each measures all three gateways)")
    parser.add_argument("--slice", type=int, default=4, help="seconds of wrk per gateway and round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--server-cpu", default="1")
    parser.add_argument("--client-cpu", default="0")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    for tool in ("nginx", "wrk", "taskset"):
        if shutil.which(tool) is None and not Path("/usr/sbin/" + tool).exists():
            sys.exit(f"{tool} not found: apt-get install nginx wrk")
    load_before = os.getloadavg()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="cascade-learning-cost-") as name:
        tmp = Path(name)
        with nginx_upstream(tmp, args.client_cpu) as nginx_port:
            for body in args.bodies:
                results[body] = one_body(args, tmp, nginx_port, body)
    print()
    for body, result in results.items():
        print(report(body, result, args.rate) + "\n")
    load_after = os.getloadavg()
    print(f"load average (1, 5, 15 min) before: {load_before}, after: {load_after}")
    if args.out:
        document = {
            "command": " ".join(["bench/gateway/learning_cost.py", *sys.argv[1:]]),
            "args": {k: str(v) for k, v in vars(args).items()},
            "load_before": load_before,
            "load_after": load_after,
            "bodies": results,
        }
        args.out.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
