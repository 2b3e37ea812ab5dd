"""The demo's promise, checked live: `cascade replay` through `cascade demo` in front of the real models.

`cascade demo` serves the committed policy (policies/local-demo.json, calibrated on
collection/data/arithmetic.jsonl); `cascade replay --strict` sends questions the calibration never
saw (collection/data/arithmetic-heldout.jsonl: the same generator, another seed) through every
tier, grades the answers as `cascade collect` did, and flags any tier whose realized quality, cost
per request or escalation rate has a confidence interval that excludes the policy's expectation
(its held-out one, ``expected.heldout``: cross-fitted on the calibration questions).
So this checks both that the live gateway reproduces what calibration measured (same prompts,
request defaults, scorer, models and prices) and that the policy's promise holds on new questions.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from policies import load_policy
from tests.support.demo_process import pool_env, running_demo

pytestmark = pytest.mark.e2e

# Questions replayed per tier: enough for intervals that mean something, few enough that three tiers
# (a fast answer each, and a step-by-step answer of the 1.5B model for the escalated ones) stay
# within several minutes on 2 cores.
REPLAY_QUESTIONS = 30
# Nine checks (3 tiers x quality, cost, escalation): at 95% each, one false flag in three runs.
# 99% intervals keep the family-wise false-alarm rate near 9%; a real mismatch (wrong prices,
# prompts, scorer or models) is far outside them.
CONFIDENCE = 0.99


def test_replayed_questions_match_the_policys_expectations(repo_root: Path, tmp_path: Path) -> None:
    policy_file = repo_root / "policies" / "local-demo.json"
    policy = load_policy(policy_file)
    prompts = repo_root / "collection" / "data" / "arithmetic-heldout.jsonl"
    with running_demo(repo_root, policy_file) as url:
        report_file = tmp_path / "replay.json"
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "cascade_cli.main",
                "replay",
                str(prompts),
                "--gateway",
                url,
                "--policy",
                str(policy_file),
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
            timeout=1500,
        )
    output = result.stdout + result.stderr
    report = json.loads(report_file.read_text(encoding="utf-8"))
    assert report["policy"]["matches"] is True, output
    arms = {arm["tier"]: arm for arm in report["arms"]}
    assert set(arms) == set(policy.tiers), output
    for tier, arm in arms.items():
        assert arm["requests"] == REPLAY_QUESTIONS and not arm["missing"], (tier, output)
        # The promise is the held-out one: measured on questions the route was not chosen on.
        heldout = policy.tiers[tier].expected.heldout
        assert heldout is not None and arm["expected_basis"] == "heldout", tier
        for metric in ("quality", "cost_usd"):
            value = arm[metric]
            expected = getattr(heldout, metric).mean
            assert value["expected"] == pytest.approx(expected), (tier, metric)
            assert value["low"] <= expected <= value["high"], (tier, metric, value, output)
    assert report["ok"] and result.returncode == 0, output
