"""What a router's features cost per request, on the prompts of the committed prompt sets.

For each feature set (``policies.route_features``): CPU time and wall time per request, computed
exactly as the gateway does (``request_parts`` of the chat body, then the features), median and
90th percentile over every prompt (repeated ``--repeat`` times for the cheap set); then the router
itself (``LinearRouter.probabilities`` + ``routed_choice`` for 3 models); then one MiniLM embedding
through the gateway's process pool (``gateway.routing.embedding_pool.EmbeddingPool``), submit to result, one
at a time: the latency a routed request pays before its first upstream call.

    .venv/bin/python bench/route_features_bench.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PROMPT_SETS = ("arithmetic.jsonl", "arithmetic-quick.jsonl", "bfcl.jsonl", "mmlu-local.jsonl")


def _percentiles(values: list[float]) -> str:
    us = np.asarray(values) * 1e6
    return f"median {np.median(us):9.1f} us, p90 {np.percentile(us, 90):9.1f} us"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20, help="passes over the prompts for cheap-v1")
    parser.add_argument("--minilm-prompts", type=int, default=200, help="prompts embedded with MiniLM")
    parser.add_argument("--pool-requests", type=int, default=30, help="embeddings through the process pool")
    args = parser.parse_args()

    from calibration.routing.prompt_features import read_prompt_requests
    from policies.route_features import CHEAP, MINILM, cheap_features, feature_dims, request_parts
    from policies.router import LinearRouter, routed_choice
    from policies.tool_calls import request_kind
    from traffic.judges.similarity import load_encoder

    requests = read_prompt_requests([REPO / "collection" / "data" / name for name in PROMPT_SETS])
    bodies = list(requests.values())
    print(f"prompts: {len(bodies)} from {', '.join(PROMPT_SETS)}; load average {os.getloadavg()[0]:.1f}")

    cpu, wall = [], []
    for _ in range(args.repeat):
        for body in bodies:
            c0, w0 = time.process_time(), time.perf_counter()
            text, n_tools, kind = request_parts(body, request_kind(body))
            cheap_features(text, n_tools, kind)
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
    print(f"{CHEAP:10s} CPU  {_percentiles(cpu)}   wall {_percentiles(wall)}   ({len(cpu)} requests)")

    from threadpoolctl import threadpool_limits

    encoder = load_encoder()
    cpu, wall = [], []
    with threadpool_limits(limits=1):
        for body in bodies[: args.minilm_prompts]:
            c0, w0 = time.process_time(), time.perf_counter()
            text, _, _ = request_parts(body, request_kind(body))
            encoder.encode(text)
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
    print(f"{MINILM:10s} CPU  {_percentiles(cpu)}   wall {_percentiles(wall)}   ({len(cpu)}, 1 thread)")

    rng = np.random.default_rng(0)
    for name in (CHEAP, MINILM):
        dims = feature_dims(name)
        router = LinearRouter(name, ("a", "b", "c"), rng.normal(size=(3, dims)), rng.normal(size=3))
        x = rng.normal(size=dims)
        times = []
        for _ in range(2000):
            t0 = time.perf_counter()
            routed_choice(router.probabilities(x), [1e-5, 1e-4, 1e-3], 100.0)
            times.append(time.perf_counter() - t0)
        print(f"router on {name:10s} (3 models, {dims} features): {_percentiles(times)}")

    from gateway.routing.embedding_pool import EmbeddingPool
    from gateway.routing.routed_tiers import RouterRuntime
    from gateway.routing.tier_choice import RoutePlanner
    from gateway.telemetry.metrics import GatewayMetrics
    from gateway.wire.requests import parse_request
    from policies import build_policy

    dims = feature_dims(CHEAP)
    route = {"weight": 1.0, "models": ["small"], "thresholds": []}
    policy = build_policy(
        {
            "scorer": {"name": "mean_token_negentropy", "top_k": 5},
            "models": {
                m: {"mean_cost_usd": c, "quality": 0.5} for m, c in (("small", 1e-5), ("large", 1e-3))
            },
            "default_tier": "routed",
            "tiers": {
                "routed": {
                    "objective": {"max_cost_usd": 0.001},
                    "routes": [route],
                    "expected": {"cost_usd": 1e-5, "quality": 0.5, "escalation_rate": 0.0},
                    "routing": {"mechanism": "routed", "price_weight": 0.0},
                }
            },
            "router": {
                "features": CHEAP,
                "models": ["small", "large"],
                "cost_usd": [1e-5, 1e-3],
                "coef": rng.normal(size=(2, dims)).tolist(),
                "intercept": [0.0, 0.0],
            },
        }
    )
    import orjson

    router_runtime = RouterRuntime(GatewayMetrics())
    planner = RoutePlanner({"small": None, "large": None})
    parsed = [parse_request(orjson.dumps({**body, "model": "cascade"}), "chat") for body in bodies[:200]]

    async def decide() -> list[float]:
        times = []
        for _ in range(5):
            for request in parsed:
                plan = planner.plan(request, policy)
                t0 = time.perf_counter()
                await router_runtime.apply(plan, request)
                times.append(time.perf_counter() - t0)
        return times

    print(
        f"RouterRuntime.apply ({CHEAP}: features, router, route, metrics): "
        f"{_percentiles(asyncio.run(decide()))}"
    )

    async def through_pool() -> list[float]:
        pool = EmbeddingPool(workers=1, max_pending=4, timeout_s=120.0)
        pool.start()
        assert await pool.wait_warm()  # the worker loads the model once
        latencies = []
        for body in bodies[: args.pool_requests]:
            text, _, _ = request_parts(body, request_kind(body))
            t0 = time.perf_counter()
            vector, why = await pool.embed(text)
            assert vector is not None, why
            latencies.append(time.perf_counter() - t0)
        pool.close()
        return latencies

    latencies = asyncio.run(through_pool())
    print(f"{MINILM} through the process pool (1 worker, one at a time): {_percentiles(latencies)}")
    print(f"numpy {np.__version__}, python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
