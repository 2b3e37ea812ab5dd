"""What sampling for learning costs the accept path, in CPU instructions (run by hand; slow).

Wall-clock throughput on a shared machine drifts by more than the 5% this is meant to resolve
(bench/gateway/learning_cost.py shows two identical servers differing by 10% within a minute).
Instructions executed do not drift: under valgrind's callgrind the same work counts the same,
whatever else the machine runs. For each body and each variant:

* ``off``    accept, no ``learning:`` section;
* ``r=0``    learning enabled with ``sample_rate: 0`` (the draw on every request, the sampler's tasks
  alive, nothing sampled): the fixed cost of having learning on;
* ``r=RATE`` each ``--rates`` value (default 0.01 and 1.0): at 1.0 every request is sampled, which
  gives the cost of one sample.

``cascade serve`` runs under callgrind (about 50x slower); after a warm-up the counters are zeroed,
wrk sends ``--connections`` clients for ``--seconds``, the writer gets 7 s to flush the last samples
(the off gateway idles as long), and the counters are dumped. Reported: instructions per request
(user space of the gateway process, all threads; kernel time such as fsync is not counted), their
ratio to ``off``, and the cost of one sample from the r=1 run.

    .venv/bin/python bench/gateway/learning_instructions.py --bodies 2k 25k \\
        --out bench/gateway/results/learning-instructions.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from callgrind_cells import callgrind_serve, instructions
from run_bench import (
    body_for,
    check_paths,
    learning_counters,
    nginx_upstream,
    run_wrk,
    write_gateway_files,
)


def sampled(counters: dict[str, float]) -> float:
    return sum(v for k, v in counters.items() if k.startswith("cascade_learning_sampled_total"))


def dropped(counters: dict[str, float]) -> float:
    return sum(v for k, v in counters.items() if k.startswith("cascade_learning_dropped_total"))


def one_variant(
    args: argparse.Namespace, tmp: Path, upstream: str, body: str, rate: float | None
) -> dict[str, Any]:
    """Instructions per request of one gateway variant (``rate`` None: learning off)."""
    name = "off" if rate is None else f"r={rate:g}"
    out_dir = tmp / f"{body}-{name}"
    out_dir.mkdir()
    config = write_gateway_files(out_dir, upstream, body=body, learning_rate=rate)
    request = body_for("accept")
    with callgrind_serve(config, out_dir, args.server_cpu) as (base, pid):
        url = base + "/v1/chat/completions"
        check_paths(base)
        run_wrk(url, request, args.connections, args.warmup, args.client_cpu)
        time.sleep(7)  # let warm-up samples finish before the counters are zeroed
        before = learning_counters(base) if rate is not None else {}
        subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)
        result = run_wrk(url, request, args.connections, args.seconds, args.client_cpu)
        time.sleep(7)  # the writer flushes every 5 s: the window's last samples are written inside it
        subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
        total = instructions(out_dir, pid)
        after = learning_counters(base) if rate is not None else {}
    bad = result["non_2xx"] + result["connect_errors"] + result["read_errors"] + result["timeouts"]
    if bad:
        raise RuntimeError(f"{body} {name}: {bad} failed requests: {result}")
    requests = result["requests"]
    row = {
        "variant": name,
        "rate": rate,
        "requests": requests,
        "instructions": total,
        "instructions_per_request": total / requests,
        "sampled": sampled(after) - sampled(before),
        "dropped": dropped(after) - dropped(before),
    }
    print(
        f"  {body} {name:>8}: {requests} requests, "
        f"{row['instructions_per_request'] / 1e6:.3f} M instr/request, "
        f"{row['sampled']:g} sampled, {row['dropped']:g} dropped",
        flush=True,
    )
    return row


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Ratios to ``off``; the cost of one processed sample (the r=1 run's instructions beyond r=0's
    per request, over the samples not dropped; the dropped ones' cost is counted against the
    processed, so the estimate errs high); the 1% prediction from it."""
    by_name = {r["variant"]: r for r in rows}
    off = by_name["off"]["instructions_per_request"]
    summary: dict[str, Any] = {
        "vs_off": {name: r["instructions_per_request"] / off for name, r in by_name.items()},
    }
    if "r=0" in by_name and "r=1" in by_name:
        one = by_name["r=1"]
        processed = one["sampled"] - one["dropped"]  # a full queue drops samples: they cost little
        if processed > 0:
            fixed = by_name["r=0"]["instructions_per_request"]
            per_sample = (one["instructions"] - fixed * one["requests"]) / processed
            summary["instructions_per_sample"] = per_sample
            summary["fixed_vs_off"] = fixed / off
            summary["predicted_vs_off_at_1pct"] = (fixed + 0.01 * per_sample) / off
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bodies", nargs="+", default=["2k", "25k"])
    parser.add_argument("--rates", nargs="+", type=float, default=[0.0, 0.01, 1.0])
    parser.add_argument("--seconds", type=int, default=40, help="measured wrk run (slowed ~50x by callgrind)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--server-cpu", default="1")
    parser.add_argument("--client-cpu", default="0")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="cascade-learning-instr-") as name:
        tmp = Path(name)
        with nginx_upstream(tmp, args.client_cpu) as nginx_port:
            for body in args.bodies:
                upstream = f"http://127.0.0.1:{nginx_port}/{body}/v1"
                rows = [one_variant(args, tmp, upstream, body, None)]
                rows += [one_variant(args, tmp, upstream, body, rate) for rate in args.rates]
                results[body] = {"variants": rows, "summary": summarize(rows)}
                print(f"  {body}: {json.dumps(results[body]['summary'])}", flush=True)
    print()
    for body, result in results.items():
        print(
            f"body {body}\n\n| variant | requests | sampled | M instructions/request | vs off |\n"
            "|---|---:|---:|---:|---:|"
        )
        for row in result["variants"]:
            ratio = result["summary"]["vs_off"][row["variant"]]
            print(
                f"| {row['variant']} | {row['requests']} | {row['sampled']:g} | "
                f"{row['instructions_per_request'] / 1e6:.3f} | {ratio:.4f} |"
            )
        summary = result["summary"]
        if "instructions_per_sample" in summary:
            print(
                f"\none sample: {summary['instructions_per_sample'] / 1e6:.2f} M instructions; "
                f"learning on, nothing sampled: {summary['fixed_vs_off']:.4f} of off; "
                f"predicted at 1%: {summary['predicted_vs_off_at_1pct']:.4f} of off\n"
            )
    if args.out:
        document = {
            "command": " ".join(["bench/gateway/learning_instructions.py", *sys.argv[1:]]),
            "args": {k: str(v) for k, v in vars(args).items()},
            "bodies": results,
        }
        args.out.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
