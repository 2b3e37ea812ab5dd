"""The README's "Try it" snippet: copy-paste-able from the repository root, leaving no untracked file."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gateway.config.settings import Settings
from tests.support.readme_blocks import bash_block, readme_section


def try_it_setup(readme: str) -> str:
    """The snippet's lines up to (not including) `cascade serve`: the config it writes.

    The whole snippet, against the real models, runs in tests/e2e/test_local_cascade.py.
    """
    return bash_block(readme, "### Try it").split("cascade serve", 1)[0]


def test_try_it_writes_its_config_to_an_ignored_path_that_loads(repo_root: Path, tmp_path: Path) -> None:
    if shutil.which("git") is None or not (repo_root / ".git").exists():
        pytest.fail("this test needs a git checkout of the repository (git check-ignore)")
    setup = try_it_setup((repo_root / "README.md").read_text())
    written = re.findall(r"cat > (\S+) <<", setup)
    assert written, setup
    # Run the snippet in a scratch copy of the paths it touches, so the test never writes to the repo.
    (tmp_path / "deploy/config").mkdir(parents=True)
    shutil.copy(repo_root / "deploy/config/policy.json", tmp_path / "deploy/config/policy.json")
    subprocess.run(["bash", "-euc", setup], cwd=tmp_path, check=True)
    for relative in written:
        ignored = subprocess.run(["git", "check-ignore", "-q", relative], cwd=repo_root)
        assert ignored.returncode == 0, f"the README writes {relative}, which git does not ignore"
        settings = Settings.from_yaml(tmp_path / relative)
        assert Path(settings.policy) == (tmp_path / "deploy/config/policy.json").resolve()
        assert set(settings.models) == {"small", "large"}


def test_try_it_waits_until_ready_and_says_its_policy_is_hand_written(repo_root: Path) -> None:
    readme = (repo_root / "README.md").read_text()
    block = bash_block(readme, "### Try it")
    assert "until curl -sf http://127.0.0.1:8000/readyz" in block, "wait for /readyz, not for some seconds"
    assert not re.search(r"^\s*sleep \d", block, re.MULTILINE), block
    # The bundled policy was written by hand: the README must not present its decisions as calibrated.
    section = " ".join(readme_section(readme, "### Try it").split())
    assert "deploy/config/policy.json" in section
    assert "hand-written example" in section and "not calibrated" in section
