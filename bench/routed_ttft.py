"""Time to first token of streamed requests a routed tier sends to its strong model, vs that model alone.

With ``cascade demo --policy FILE`` running (a policy whose tier ``--tier`` is ``routed`` or
``hybrid``), this picks the questions of ``--prompts`` the tier's router sends straight to the strong model
(the router's most expensive model; computed as the gateway does, from the policy's ``router``),
then streams each of the first ``--requests`` of them, one request at a time, to both arms:

* ``routed``: through the gateway, ``model: cascade/<tier>``; its ``x-cascade-models-called``
  header must name the strong model alone;
* ``direct``: straight to the strong model's llama-server, with the pool member's system message,
  as the gateway sends it.

Both arms send ``max_tokens`` ``--max-tokens`` (16; 0: the member's own 192 on both): the first
token does not depend on it, and it keeps the run short on a shared CPU.

Which arm goes first alternates from question to question, and both send ``cache_prompt: false``
(llama-server's prompt cache off: the gateway forwards the field), so every request evaluates its
whole prompt. Time to first token: from sending the request to the first chunk with non-empty
``delta.content``. Prints p50/p90 per arm and the median paired difference.

    .venv/bin/python bench/routed_ttft.py --gateway http://127.0.0.1:8080 \
        --policy policies/local-demo-routed.json --tier balanced --requests 10 \
        --prompts collection/data/arithmetic.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.streamed import timed_stream  # noqa: E402  (the repository on the path first)


def strong_routed(policy_file: Path, tier: str, prompts: Path) -> tuple[str, list[dict[str, Any]]]:
    """The tier's strong model and the prompt-set rows its router sends straight to it, in file order."""
    from calibration.routing.prompt_features import prompt_request, request_features
    from policies import load_policy
    from policies.router import LinearRouter, goes_direct, routed_choice

    policy = load_policy(policy_file)
    routing = policy.tiers[tier].routing
    spec = policy.router
    if routing is None or spec is None:
        raise SystemExit(f"tier {tier!r} of {policy_file} is not routed (no routing / router)")
    router = LinearRouter(
        spec.features, tuple(spec.models), np.asarray(spec.coef), np.asarray(spec.intercept)
    )
    if routing.mechanism == "routed":
        strong = spec.models[int(np.argmax(spec.cost_usd))]
    else:
        assert routing.models is not None
        strong = routing.models[-1]
    rows = []
    for line in prompts.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        p = router.probabilities(request_features(prompt_request(row), spec.features))
        if routing.mechanism == "routed":
            assert routing.price_weight is not None
            chosen = spec.models[routed_choice(p, spec.cost_usd, routing.price_weight)]
        elif routing.models is not None and len(routing.models) == 1:
            chosen = routing.models[0]
        else:
            assert routing.models is not None and routing.direct_below is not None
            cheap_p = float(p[spec.models.index(routing.models[0])])
            chosen = strong if goes_direct(cheap_p, routing.direct_below) else routing.models[0]
        if chosen == strong:
            rows.append(row)
    return strong, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gateway", default="http://127.0.0.1:8080")
    parser.add_argument("--policy", type=Path, default=REPO / "policies" / "local-demo-routed.json")
    parser.add_argument("--tier", default="balanced")
    parser.add_argument(
        "--prompts", type=Path, default=REPO / "collection" / "data" / "arithmetic-heldout.jsonl"
    )
    parser.add_argument("--requests", type=int, default=10, help="requests per arm")
    parser.add_argument("--max-tokens", type=int, default=16, help="cap on both arms (0: the member's own)")
    args = parser.parse_args()

    from localpool.manifest import load_manifest
    from localpool.pool import base_url

    strong, rows = strong_routed(args.policy, args.tier, args.prompts)
    manifest = load_manifest()
    server = manifest.server_of(strong)
    direct_url = base_url(manifest.models[server]) + "/chat/completions"
    defaults = manifest.members[strong].request_defaults if strong in manifest.members else None
    print(
        f"tier {args.tier}: {len(rows)} of the questions in {args.prompts.name} routed to {strong} "
        f"(server {server}, {direct_url}); load average {os.getloadavg()[0]:.1f}"
    )
    if len(rows) < args.requests:
        raise SystemExit(f"need {args.requests} questions routed to {strong}, have {len(rows)}")
    ttft: dict[str, list[float]] = {"routed": [], "direct": []}
    elsewhere = 0
    # The same cap on both arms (the member's own is 192): the first token does not depend on it.
    cap = {"max_tokens": args.max_tokens} if args.max_tokens else {}
    if not cap and defaults and defaults.max_tokens:
        cap = {"max_tokens": defaults.max_tokens}
    # llama-server's prompt cache off on both arms (the gateway forwards the field): each request
    # evaluates its whole prompt, so the pair's second request does not find the first one's.
    extra = {**cap, "cache_prompt": False}
    with httpx.Client(timeout=300) as client:
        for number, row in enumerate(rows[: args.requests]):
            messages = [{"role": "user", "content": row["prompt"]}]
            routed_body = {
                "model": f"cascade/{args.tier}",
                "temperature": 0,
                "stream": True,
                "messages": messages,
            }
            # What the gateway sends for the member: its system message before the client's messages.
            system = [{"role": "system", "content": defaults.system}] if defaults and defaults.system else []
            direct_body = {"model": server, "temperature": 0, "stream": True, "messages": system + messages}
            order = (
                ("routed", "direct") if number % 2 == 0 else ("direct", "routed")
            )  # alternate who goes first
            for arm in order:
                if arm == "routed":
                    url, body = f"{args.gateway}/v1/chat/completions", routed_body
                else:
                    url, body = direct_url, direct_body
                timed = timed_stream(client, url, {**body, **extra})
                seconds, called = timed.ttft_s, ",".join(timed.decision.models_called)
                if arm == "routed" and called != strong:
                    elsewhere += 1
                    print(f"  {row['query_id']}: routed to {called}, not {strong}")
                ttft[arm].append(seconds)
            print(
                f"  {row['query_id']}: ttft routed {ttft['routed'][-1] * 1000:8.1f} ms, "
                f"direct {ttft['direct'][-1] * 1000:8.1f} ms"
            )
    print(f"routed elsewhere by the gateway: {elsewhere}; load average {os.getloadavg()[0]:.1f}")
    if elsewhere:
        raise SystemExit("the gateway routed differently from the policy's router: no comparison")
    for arm, values in ttft.items():
        ms = np.asarray(values) * 1000
        print(
            f"{arm:<6} n={len(ms)}  p50 {np.median(ms):7.1f} ms  p90 {np.percentile(ms, 90):7.1f} ms  "
            f"min {ms.min():7.1f} ms  max {ms.max():7.1f} ms"
        )
    difference = (np.asarray(ttft["routed"]) - np.asarray(ttft["direct"])) * 1000
    print(f"routed - direct, same question: median {np.median(difference):+.1f} ms")


if __name__ == "__main__":
    main()
