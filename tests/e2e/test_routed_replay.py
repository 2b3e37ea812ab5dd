"""A routed tier's promise, checked live: `cascade replay` through the demo serving a routing policy.

policies/local-demo-routed.json is the demo's arithmetic policy calibrated with
`--mechanisms cascade,routed,hybrid --features cheap-v1` (docs/routing.md): some of its tiers serve
the pre-generation router (or route-then-cascade) rather than the cascade. Held-out questions
(collection/data/arithmetic-heldout.jsonl) replayed through those tiers, against the real local
models, must show realized quality, cost per request and escalation rate whose intervals contain the
tier's held-out expectation: the gateway computes the same features, router and route as calibration.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from policies import load_policy
from tests.support.local_demo import replay_through, running_demo
from tests.support.local_pool import LocalPool

pytestmark = pytest.mark.e2e

# A few questions per routed tier: the intervals are wide, but a gateway that routes differently
# from calibration (other features, coefficients, prices or members) misses them; a longer run is
# in docs/routing.md. Few, because a question routed to the reasoning member takes ~10-30 s here.
REPLAY_QUESTIONS = 8
CONFIDENCE = 0.99


def test_routed_tiers_replay_within_their_heldout_expectations(
    local_pool: LocalPool, repo_root: Path, tmp_path: Path
) -> None:
    policy_file = repo_root / "policies" / "local-demo-routed.json"
    policy = load_policy(policy_file)
    routed = {name: tier.routing.mechanism for name, tier in policy.tiers.items() if tier.routing is not None}
    assert routed, "the routing policy has no routed or hybrid tier"
    prompts = repo_root / "collection" / "data" / "arithmetic-heldout.jsonl"
    with running_demo(local_pool, repo_root, tmp_path / "demo", policy_file) as demo:
        run = replay_through(
            repo_root,
            demo,
            prompts,
            policy_file,
            list(routed),
            REPLAY_QUESTIONS,
            tmp_path / "replay.json",
            "--confidence",
            str(CONFIDENCE),
        )
    run.assert_within_heldout(routed, REPLAY_QUESTIONS)
    output, report, rows = run.output, run.report, run.rows
    for row in rows:
        if routed[row["tier"]] == "routed":  # one call, to the model the router picked: nothing escalates
            assert row["mechanism"] == "routed", row
            assert row["models_called"] == [row["model"]] and not row["escalated"], row
        else:
            assert row["mechanism"] in ("hybrid_direct", "hybrid_cascade"), row
    assert report["ok"] and run.returncode == 0, output
