"""`cascade demo --smoke`: pool + gateway started, one cascade request answered, everything stopped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from local_cascade_support import CHEAP, STRONG, two_model_policy

from localpool.manifest import load_manifest
from localpool.paths import PoolPaths
from localpool.process import read_record
from policies import save_policy
from tests.support.ports import free_port

pytestmark = pytest.mark.e2e


def _pool_paths(repo_root: Path) -> PoolPaths:
    """Where scripts/setup.sh installed the pool: ``$CASCADE_HOME`` or the repository's ``.cascade``."""
    home = os.environ.get("CASCADE_HOME")
    return PoolPaths(Path(home) if home else repo_root / ".cascade")


def test_demo_smoke_serves_one_cascade_request_and_cleans_up(repo_root: Path, tmp_path: Path) -> None:
    policy = two_model_policy(0.5, top_k=15, qualities=(0.2, 0.3), expected_quality=0.25)
    policy_path = tmp_path / "policy.json"
    save_policy(policy, policy_path)
    paths = _pool_paths(repo_root)
    running_before = {n for n in (CHEAP, STRONG) if read_record(paths.pid_file(n)) is not None}
    command = [
        sys.executable,
        "-m",
        "cascade_cli.main",
        "demo",
        "--smoke",
        "--port",
        str(free_port()),
        "--policy",
        str(policy_path),
    ]
    result = subprocess.run(
        command,
        cwd=repo_root,
        env={**os.environ, "CASCADE_HOME": str(paths.home)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"x-cascade-policy: {policy.policy_id}" in output
    assert "x-cascade-models-called: smollm2-135m" in output
    assert "answer: " in output and "gateway: stopped" in output
    manifest = load_manifest()
    for name in {CHEAP, STRONG} - running_before:  # what the demo started, it stopped
        assert read_record(paths.pid_file(name)) is None, name
        assert manifest.models[name].port  # (ports come from the manifest)
