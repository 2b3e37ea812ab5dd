"""A routed tier's promise, checked live: `cascade replay` through the demo serving a routing policy.

policies/local-demo-routed.json is the demo's arithmetic policy calibrated with
`--mechanisms cascade,routed,hybrid --features cheap-v1` (docs/routing.md): some of its tiers serve
the pre-generation router (or route-then-cascade) rather than the cascade. Held-out questions
(collection/data/arithmetic-heldout.jsonl) replayed through those tiers, against the real local
models, must show realized quality, cost per request and escalation rate whose intervals contain the
tier's held-out expectation: the gateway computes the same features, router and route as calibration.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from policies import load_policy
from tests.support.local_demo import pool_env, running_demo

pytestmark = pytest.mark.e2e

# A few questions per routed tier: the intervals are wide, but a gateway that routes differently
# from calibration (other features, coefficients, prices or members) misses them; a longer run is
# in docs/routing.md. Few, because a question routed to the reasoning member takes ~10-30 s here.
REPLAY_QUESTIONS = 8
CONFIDENCE = 0.99


def test_routed_tiers_replay_within_their_heldout_expectations(repo_root: Path, tmp_path: Path) -> None:
    policy_file = repo_root / "policies" / "local-demo-routed.json"
    policy = load_policy(policy_file)
    routed = {name: tier.routing.mechanism for name, tier in policy.tiers.items() if tier.routing is not None}
    assert routed, "the routing policy has no routed or hybrid tier"
    prompts = repo_root / "collection" / "data" / "arithmetic-heldout.jsonl"
    report_file = tmp_path / "replay.json"
    with running_demo(repo_root, tmp_path / "demo", policy_file) as demo:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "cascade_cli.main",
                "replay",
                str(prompts),
                "--gateway",
                demo.url,
                "--policy",
                str(policy_file),
                "--tier",
                ",".join(routed),
                "--limit",
                str(REPLAY_QUESTIONS),
                "--concurrency",
                "2",
                "--confidence",
                str(CONFIDENCE),
                "--strict",
                "-o",
                str(report_file),
            ],
            cwd=repo_root,
            env=pool_env(repo_root),
            capture_output=True,
            text=True,
            timeout=900,
        )
    output = result.stdout + result.stderr
    report = json.loads(report_file.read_text(encoding="utf-8"))
    assert report["policy"]["matches"] is True, output
    arms = {arm["tier"]: arm for arm in report["arms"]}
    assert set(arms) == set(routed), output
    for tier, arm in arms.items():
        assert arm["requests"] == REPLAY_QUESTIONS and not arm["missing"], (tier, output)
        assert arm["expected_basis"] == "heldout", tier
        for metric in ("quality", "cost_usd", "escalation_rate"):
            assert arm[metric]["outside"] is False, (tier, metric, arm[metric], output)
    rows = [
        json.loads(line)
        for line in report_file.with_name("replay.requests.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    for row in rows:
        if routed[row["tier"]] == "routed":  # one call, to the model the router picked: nothing escalates
            assert row["mechanism"] == "routed", row
            assert row["models_called"] == [row["model"]] and not row["escalated"], row
        else:
            assert row["mechanism"] in ("hybrid_direct", "hybrid_cascade"), row
    assert report["ok"] and result.returncode == 0, output
