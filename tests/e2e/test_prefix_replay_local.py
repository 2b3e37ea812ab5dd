"""A calibrated prefix tier's promise, checked live: `cascade replay --stream` through the local pool.

policies/local-steps-hosted.json is the word-problem policy calibrated with `--commit-grid` at the
hosted price sheet (data/local/word-problems-hosted-prices.yaml, docs/streaming.md): its tiers whose
prefix rule kept the buffered gain commit on the first tokens of the 0.5B member's answer. Held-out
word problems (collection/data/word-problems-heldout.jsonl, never calibrated on), streamed through
those tiers against the real 0.5B and 1.5B servers, must show realized quality, cost per request and
escalation rate whose intervals contain the tier's held-out expectation: the gateway scores the same
prefix (`policies.commit.prefix_entries`) with the same scorer, and charges a cancelled cheap stage
by the same rule (`money.charges.cancelled_tokens_bound`) at the same prices as calibration.
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

# A few questions per prefix tier: the intervals are wide, but a gateway that decides on another
# prefix, scores it otherwise or charges a cancelled stage otherwise than calibration misses them;
# a longer run is in docs/streaming.md. Few, because an accepted answer streams ~15-25 s here.
REPLAY_QUESTIONS = 6
CONFIDENCE = 0.99


def test_prefix_tiers_replay_streamed_within_their_heldout_expectations(
    repo_root: Path, tmp_path: Path
) -> None:
    policy_file = repo_root / "policies" / "local-steps-hosted.json"
    prices = repo_root / "data" / "local" / "word-problems-hosted-prices.yaml"
    policy = load_policy(policy_file)
    prefix_tiers = [name for name, tier in policy.tiers.items() if tier.commit is not None]
    assert prefix_tiers, "the hosted word-problem policy has no prefix tier"
    prompts = repo_root / "collection" / "data" / "word-problems-heldout.jsonl"
    report_file = tmp_path / "replay.json"
    with running_demo(repo_root, tmp_path / "demo", policy_file, prices=prices) as demo:
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
                ",".join(prefix_tiers),
                "--limit",
                str(REPLAY_QUESTIONS),
                "--concurrency",
                "2",
                "--confidence",
                str(CONFIDENCE),
                "--stream",
                "--strict",
                "-o",
                str(report_file),
            ],
            cwd=repo_root,
            env=pool_env(repo_root),
            capture_output=True,
            text=True,
            timeout=1800,
        )
    output = result.stdout + result.stderr
    report = json.loads(report_file.read_text(encoding="utf-8"))
    assert report["policy"]["matches"] is True, output
    arms = {arm["tier"]: arm for arm in report["arms"]}
    assert set(arms) == set(prefix_tiers), output
    for tier, arm in arms.items():
        assert arm["requests"] == REPLAY_QUESTIONS and not arm["missing"], (tier, output)
        assert arm["expected_basis"] == "heldout", tier
        for metric in ("quality", "cost_usd", "escalation_rate"):
            assert arm[metric]["outside"] is False, (tier, metric, arm[metric], output)
    rows = [
        json.loads(line)
        for line in report_file.with_name("replay.requests.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    for row in rows:  # every request was decided on its prefix (none of these answers is shorter)
        assert row["commit"] == "prefix" and row["commit_tokens"], row
    assert report["ok"] and result.returncode == 0, output
