"""The README's "Learn from your traffic" try-it block works when pasted (run in a scratch copy)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from policies.store import load_policy


def try_it_block(readme: str) -> str:
    section = readme.split("## Learn from your traffic\n", 1)[1].split("\n## ", 1)[0]
    after = section.split("**Try it**", 1)[1]
    block = re.search(r"```bash\n(.*?)```", after, re.DOTALL)
    assert block is not None, "no bash block after **Try it** in 'Learn from your traffic'"
    return block.group(1)


def test_learn_from_traffic_block_labels_exports_calibrates_and_recalibrates(
    repo_root: Path, tmp_path: Path
) -> None:
    block = try_it_block((repo_root / "README.md").read_text())
    assert (
        "cascade traffic export" in block and "cascade calibrate" in block and "cascade recalibrate" in block
    )
    (tmp_path / "data").mkdir()
    shutil.copytree(repo_root / "data/local", tmp_path / "data/local")
    (tmp_path / "policies").mkdir()
    shutil.copy(repo_root / "policies/local-demo.json", tmp_path / "policies")
    script = block.replace(".venv/bin/cascade", f"{sys.executable} -m cascade_cli.main")
    result = subprocess.run(
        ["bash", "-euc", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(repo_root)},
    )
    assert result.returncode == 0, result.stderr
    assert "agreement with qwen1.5b-think" in result.stderr
    rows = [json.loads(line) for line in (tmp_path / "reports/traffic/runs.jsonl").read_text().splitlines()]
    assert {r["judge"] for r in rows} == {"numeric", "reference"}
    policy = load_policy(tmp_path / "reports/traffic/policy.json")
    assert policy.models["qwen1.5b-think"].quality == 1.0  # agreement with itself
    report = json.loads((tmp_path / "reports/traffic/recalibrate.json").read_text())
    assert (
        report["current_policy"]["policy_id"] == load_policy(repo_root / "policies/local-demo.json").policy_id
    )
    # The served policy was calibrated on these very questions (in-sample on the held-out half), so
    # the README says the comparison refuses; it must keep saying what happens.
    assert "recalibrate exited 3 (3: refused)" in result.stdout
    assert report["decision"]["accepted"] is False and report["decision"]["pushed"] is False
    assert "tier 'balanced': quality" in (repo_root / "README.md").read_text()
    assert set(report["tiers"]) == {"economy", "balanced", "quality"}
