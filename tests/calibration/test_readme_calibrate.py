"""The README's "Calibrate your own models" block runs as written on a checkout alone (bundled plaut-mc)."""

from __future__ import annotations

from pathlib import Path

import yaml

from policies.store import load_policy
from tests.support.readme_blocks import bash_block, run_block, scratch_checkout


def test_calibrate_block_writes_a_policy_and_report_from_the_bundled_runs(
    repo_root: Path, tmp_path: Path
) -> None:
    block = bash_block((repo_root / "README.md").read_text(), "## Calibrate your own models")
    assert ".venv/bin/cascade calibrate data/plaut-mc/runs.csv.gz" in block
    # Only what a clone holds: the bundled runs and price sheet, and the example tiers.
    env = scratch_checkout(repo_root, tmp_path, ["data/plaut-mc", "calibration/examples/tiers.yaml"])

    result = run_block(block, tmp_path, env, timeout_s=600)

    assert result.returncode == 0, result.stdout + result.stderr
    policy = load_policy(tmp_path / "reports/plaut-mmlu/policy.json")
    tiers = yaml.safe_load((repo_root / "calibration/examples/tiers.yaml").read_text())
    assert set(policy.tiers) == set(tiers["tiers"]) and policy.default_tier == tiers["default_tier"]
    assert len(policy.models) == 12 and "gpt-4-turbo" in policy.models
    assert (tmp_path / "reports/plaut-mmlu/report.html").stat().st_size > 0
    assert "gpt-4-turbo" in result.stdout + result.stderr
