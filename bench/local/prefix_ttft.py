"""Time to first token and whole answer, streamed: a calibrated prefix tier, the same tier buffered,
each model alone.

Reads a calibrated policy (``--policy``) and one of its tiers whose ``commit`` is ``prefix``
(``--tier``), and serves two tiers through the gateway: that tier as calibrated, and its buffered
twin ``<tier>-buffer`` (the whole cheap answer is scored before the first byte): the tier of that
name in ``--buffer-policy``, the same runs and tiers calibrated without ``--commit-grid`` (its own
thresholds: a prefix's threshold applied to whole answers would escalate nearly all of them), else
the tier with its ``commit`` removed. The pool's servers for the tier's two members and ``cascade serve``
start on free ports (``tests.support.local_demo.running_demo``, the e2e tests' starter, with
``--prices``: the price sheet the policy was calibrated with). Every question is streamed, one
request at a time, to four arms in a rotating order:

* ``cheap``: straight to the cheap member's server, as the gateway sends that member (its system
  message and cap);
* ``final``: straight to the final member's server, likewise;
* ``buffer``: through the gateway, ``model: cascade/<tier>-buffer``;
* ``prefix``: through the gateway, ``model: cascade/<tier>``.

Every request is streamed with ``temperature: 0`` and ``cache_prompt: false`` (llama-server's prompt
cache off; the gateway forwards the field), so each one evaluates its whole prompt. Time to first
token: from sending the request to the first chunk with non-empty ``delta.content``; whole answer:
to ``[DONE]``. Gateway arms are split by outcome (``x-cascade-escalated``: the decision is made
before the first byte). Prints p50/p95 per arm and outcome and writes every request to ``--out``.

    cascade calibrate data/local/word-problems-runs.jsonl.gz \\
        --tiers data/local/word-problems-hosted-tiers.yaml \\
        --prices data/local/word-problems-hosted-prices.yaml --scorer min_probability --top-k 5 \\
        -o bench/local/results/local-steps-hosted-buffer.json
    CASCADE_HOME=.cascade .venv/bin/python bench/local/prefix_ttft.py \\
        --policy policies/local-steps-hosted.json --tier balanced \\
        --buffer-policy bench/local/results/local-steps-hosted-buffer.json \\
        --prices data/local/word-problems-hosted-prices.yaml --requests 12 \\
        --out bench/local/results/prefix-ttft-calibrated.json

``--prompts FILE`` (a prompt set's JSONL, ``prompt`` field): the questions (default: the word
problems' held-out slice, ``collection/data/word-problems-heldout.jsonl``, which calibration never
saw). ``--combine A.json B.json`` summarizes the rows of earlier runs together.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.streamed import timed_stream  # noqa: E402  (the repository on the path first)

ARMS = ("cheap", "final", "buffer", "prefix")
QUESTIONS = REPO / "collection" / "data" / "word-problems-heldout.jsonl"


def bench_policy(policy: Path, tier: str, out: Path, buffered_from: Path | None = None) -> tuple[str, str]:
    """Write ``policy`` with tier ``tier`` (a ``prefix`` tier) and its buffered twin ``<tier>-buffer``
    to ``out``: the (cheap, final) members of the tier's route. The twin is ``buffered_from``'s tier
    of that name (the same runs and tiers calibrated under the buffered rule: its own thresholds),
    else the tier without its ``commit``."""
    document = json.loads(policy.read_text())
    chosen = document["tiers"].get(tier)
    if chosen is None or (chosen.get("commit") or {}).get("rule") != "prefix":
        raise SystemExit(f"{policy}: tier {tier!r} has no prefix commit rule")
    routes = chosen["routes"]
    if len(routes) != 1 or len(routes[0]["models"]) != 2:
        raise SystemExit(f"{policy}: tier {tier!r} is not one two-model route")
    if buffered_from is not None:
        buffered = json.loads(buffered_from.read_text())["tiers"][tier]
        if buffered.get("commit") is not None or buffered["routes"][0]["models"] != routes[0]["models"]:
            raise SystemExit(f"{buffered_from}: tier {tier!r} is not the buffered twin of {policy}'s")
    else:
        buffered = {k: v for k, v in chosen.items() if k != "commit"}
    document["tiers"] = {tier: chosen, f"{tier}-buffer": buffered}
    document["default_tier"] = tier
    document.pop("score_distribution", None)  # drift bins of the calibrated tiers: not watched here
    from policies import build_policy, save_policy

    save_policy(build_policy(document), out)
    cheap, final = routes[0]["models"]
    return cheap, final


def stream_once(client: httpx.Client, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """Stream one request: seconds to the first content token and to ``[DONE]``, tokens, outcome."""
    timed = timed_stream(client, url, body)
    escalated = timed.decision.escalated
    outcome = None if escalated is None else ("escalated" if escalated else "accepted")
    return {
        "ttft_s": timed.ttft_s,
        "whole_s": timed.whole_s,
        "chunks": timed.chunks,
        "outcome": outcome,
        "commit_tokens": timed.decision.commit_tokens,
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
    parser.add_argument("--policy", type=Path, help="a calibrated policy with a prefix tier")
    parser.add_argument("--tier", help="its tier whose commit rule is prefix")
    parser.add_argument("--prices", type=Path, help="the price sheet the policy was calibrated with")
    parser.add_argument(
        "--buffer-policy", type=Path, help="the same runs and tiers calibrated without --commit-grid"
    )
    parser.add_argument("--prompts", type=Path, default=QUESTIONS, help="JSONL with a prompt field")
    parser.add_argument("--requests", type=int, default=16, help="questions (each to every arm)")
    parser.add_argument("--skip", type=int, default=0, help="start after this many questions")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--combine", type=Path, nargs="+", help="summarize the rows of these result files together (no run)"
    )
    args = parser.parse_args()

    if args.combine:
        combined = [row for path in args.combine for row in json.loads(path.read_text())["rows"]]
        print_summary(summarize(combined))
        if args.out is not None:
            document = {"command": " ".join(sys.argv), "summary": summarize(combined), "rows": combined}
            args.out.write_text(json.dumps(document, indent=2) + "\n")
        return
    if args.policy is None or args.tier is None:
        parser.error("--policy and --tier are required (or --combine)")
    from localpool.manifest import load_manifest
    from policies import load_policy
    from tests.support.local_demo import running_demo

    lines = args.prompts.read_text(encoding="utf-8").splitlines()
    questions = [json.loads(line)["prompt"] for line in lines if line.strip()]
    questions = questions[args.skip : args.skip + args.requests]
    manifest = load_manifest()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="prefix-ttft-") as tmp:
        policy_path = Path(tmp) / "policy.json"
        cheap, final = bench_policy(args.policy, args.tier, policy_path, args.buffer_policy)
        policy = load_policy(policy_path)
        with running_demo(REPO, Path(tmp) / "demo", policy_path, prices=args.prices) as demo:
            servers = {
                m: f"http://127.0.0.1:{demo.manifest.models[manifest.server_of(m)].port}/v1"
                for m in (cheap, final)
            }
            print(
                f"policy {policy.policy_id} ({args.policy}, tier {args.tier}); "
                f"load average {os.getloadavg()[0]:.1f}"
            )
            cap = manifest.members[cheap].request_defaults.completion_cap()
            with httpx.Client(timeout=900) as client:
                for number, question in enumerate(questions):
                    messages = [{"role": "user", "content": question}]
                    common = {"temperature": 0, "stream": True, "cache_prompt": False}
                    bodies: dict[str, tuple[str, dict[str, Any]]] = {}
                    for arm, member in (("cheap", cheap), ("final", final)):
                        defaults = manifest.members[member].request_defaults
                        system = [{"role": "system", "content": defaults.system}] if defaults.system else []
                        body = {"model": manifest.server_of(member), "messages": system + messages, **common}
                        member_cap = defaults.completion_cap()
                        if member_cap:
                            body["max_tokens"] = member_cap
                        bodies[arm] = (f"{servers[member]}/chat/completions", body)
                    for arm, tier in (("buffer", f"{args.tier}-buffer"), ("prefix", args.tier)):
                        # The cheap member's own cap, sent by the client: an answer that reaches it is
                        # not "cut short" (escalated whatever its score), as it is not at the member's.
                        body = {"model": f"cascade/{tier}", "messages": messages, "max_tokens": cap, **common}
                        bodies[arm] = (f"{demo.url}/v1/chat/completions", body)
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
