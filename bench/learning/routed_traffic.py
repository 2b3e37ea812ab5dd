"""Sampled traffic of a routed policy, from collected runs: the input of a real router refit.

Splits the queries of a runs table (``cascade collect`` output, ground-truth ``correct``) in two,
seeded: on the OLD half it calibrates the policy the gateway would serve (``cascade calibrate
--mechanisms cascade,routed,hybrid``, the router's features from the prompt set), and writes the
NEW half to a JSONL traffic store as the gateway's sampler stores it: one judged row per pool model,
each carrying the request's router features (``route``; ``gateway/learning/router_inputs.py``).
``cascade recalibrate`` on that store against that policy is then the learning loop on fresh
traffic the current router never saw. The labels are the ground truth (a perfect judge), so what
is measured is the refit, not a judge.

Run from the repository root (docs/routing.md, "Learning"):

    .venv/bin/python bench/learning/routed_traffic.py data/local/arithmetic-runs.jsonl.gz \\
        --prompts collection/data/arithmetic.jsonl --prompts collection/data/arithmetic-quick.jsonl \\
        --tiers data/local/arithmetic-tiers.yaml --scorer min_probability --top-k 10 --out /tmp/rr
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", type=Path, help="JSONL runs table with ground-truth 'correct'")
    parser.add_argument(
        "--prompts", type=Path, action="append", required=True, help="the runs' prompt set(s)"
    )
    parser.add_argument("--tiers", type=Path, required=True)
    parser.add_argument("--features", default="cheap-v1")
    parser.add_argument("--scorer", default=None)
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0, help="seed of the old/new split")
    parser.add_argument("--heldout-splits", type=int, default=50)
    parser.add_argument("--out", type=Path, required=True, help="directory: current.json, traffic.jsonl")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))

    from calibration.commands.calibrate_cli import CalibrateOptions, routing_options
    from calibration.heldout_expected import HeldoutSettings
    from calibration.policy.kinds import calibrate_kinds, load_runs_by_kind
    from calibration.routing.prompt_features import features_for_queries, read_prompt_requests
    from calibration.tiers import load_tiers
    from policies import save_policy
    from traffic.backends import open_store
    from traffic.rows import TrafficRow

    rows = _read_jsonl(args.runs)
    queries = sorted({str(r["query_id"]) for r in rows})
    random.Random(args.seed).shuffle(queries)
    old = set(queries[: len(queries) // 2])
    args.out.mkdir(parents=True, exist_ok=True)
    old_runs = args.out / "old-runs.jsonl"
    old_runs.write_text("".join(json.dumps(r) + "\n" for r in rows if str(r["query_id"]) in old))

    started = time.process_time()
    options = CalibrateOptions(
        runs=old_runs,
        tiers=args.tiers,
        output=args.out / "current.json",
        mechanisms=("cascade", "routed", "hybrid"),
        prompts=list(args.prompts),
        features=args.features,
        heldout_splits=args.heldout_splits,
    )
    matrices = load_runs_by_kind(old_runs, scorer=args.scorer, top_k=args.top_k)
    matrices, routing = routing_options(options, matrices)
    calibrated = calibrate_kinds(
        matrices, load_tiers(args.tiers), heldout=HeldoutSettings(splits=args.heldout_splits), routing=routing
    )
    save_policy(calibrated.policy, options.output)
    served = {
        n: (t.routing.mechanism if t.routing else "cascade") for n, t in calibrated.policy.tiers.items()
    }
    print(
        f"current policy {calibrated.policy.policy_id} from {len(old)} old queries: {served} "
        f"({time.process_time() - started:.0f} s CPU) -> {options.output}"
    )

    new = [q for q in queries if q not in old]
    vectors = features_for_queries(new, read_prompt_requests(list(args.prompts)), args.features).features
    routes: dict[str, dict[str, Any]] = {
        q: {
            "features": args.features,
            "values": [float(v) for v in vector],
            "mechanism": None,
            "router_probability": None,
            "models": None,
        }
        for q, vector in zip(new, vectors, strict=True)
    }
    stamp = datetime.now(UTC)
    traffic: list[TrafficRow] = []
    for r in rows:
        query = str(r["query_id"])
        if query in old:
            continue
        traffic.append(
            TrafficRow(
                query_id=query,
                model=str(r["model"]),
                correct=float(r["correct"]),
                prompt_tokens=int(r.get("prompt_tokens") or 0),
                completion_tokens=int(r.get("completion_tokens") or 0),
                cost_usd=float(r["cost_usd"]),
                logprobs=r.get("logprobs"),
                latency_ms=r.get("latency_ms"),
                dataset=r.get("dataset"),
                timestamp=stamp,
                judge="ground_truth",
                route=routes[query],
            )
        )
    store_path = args.out / "traffic.jsonl"
    store_path.unlink(missing_ok=True)

    async def write() -> None:
        store = open_store(f"file://{store_path}")
        await store.write_rows(traffic)
        await store.close()

    asyncio.run(write())
    print(f"new traffic: {len(routes)} queries, {len(traffic)} rows with router features -> {store_path}")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


if __name__ == "__main__":
    main()
