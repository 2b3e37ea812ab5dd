"""The demo's promise, checked live: `cascade replay` through `cascade demo` in front of the real models.

`cascade demo` serves the committed policy (policies/local-demo-served.json: local-demo.json, calibrated on
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
import os
import re
from pathlib import Path

import pytest

from policies import load_policy
from tests.support.ports import free_port
from tests.support.readme_blocks import bash_block, run_block, scratch_checkout

pytestmark = pytest.mark.e2e

# The README's block replays 30 questions per tier: enough for intervals that mean something, few
# enough that three tiers (a fast answer each, and a step-by-step answer of the 1.5B model for the
# escalated ones) stay within several minutes on 2 cores. Nine checks (3 tiers x quality, cost,
# escalation) at 95% each would raise one false flag in three runs; its 99% intervals keep the
# family-wise false-alarm rate near 9%, and a real mismatch (wrong prices, prompts, scorer or
# models) is far outside them.
REPLAY_QUESTIONS = 30
CONFIDENCE = 0.99
# What the block reads besides the pool: the questions and the demo policy (with its held-out table).
BLOCK_FILES = [
    "collection/data/arithmetic-heldout.jsonl",
    "policies/local-demo-served.json",
    "policies/local-demo-heldout.json",
]


def _pool_env(repo_root: Path, env: dict[str, str]) -> dict[str, str]:
    """The block's environment plus the pool's: where scripts/setup.sh installed it, its settings."""
    pool = {name: value for name, value in os.environ.items() if name.startswith("CASCADE_")}
    home = os.environ.get("CASCADE_HOME") or str(repo_root / ".cascade")
    return {**env, **pool, "CASCADE_HOME": home}


def test_replayed_questions_match_the_policys_expectations(repo_root: Path, tmp_path: Path) -> None:
    """The README's replay block, pasted: `cascade demo &`, wait until ready, `cascade replay --strict`.

    Only the gateway's port changes (a free one, not the README's 8080), so the test never meets a
    demo someone else started.
    """
    block = bash_block((repo_root / "README.md").read_text(), "## Check a live gateway against its policy")
    assert f"--limit {REPLAY_QUESTIONS} --confidence {CONFIDENCE} --strict" in block
    assert re.search(r"^cascade demo --port 8080 ", block, re.MULTILINE) and "kill %1" in block
    block = block.replace("8080", str(free_port()))
    policy = load_policy(repo_root / "policies" / "local-demo-served.json")
    env = _pool_env(repo_root, scratch_checkout(repo_root, tmp_path, BLOCK_FILES))

    result = run_block(block, tmp_path, env, timeout_s=2400, stops_itself=True)

    demo_log = tmp_path / "reports/replay/demo.log"
    output = result.stdout + result.stderr + (demo_log.read_text() if demo_log.exists() else "")
    report = json.loads((tmp_path / "reports/replay/demo.json").read_text(encoding="utf-8"))
    assert report["policy"]["matches"] is True, output
    arms = {arm["tier"]: arm for arm in report["arms"]}
    assert set(arms) == set(policy.tiers), output
    assert report["confidence"] == CONFIDENCE
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
    assert (tmp_path / "reports/replay/demo.html").stat().st_size > 0
