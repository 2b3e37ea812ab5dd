"""The repository stands alone: no tracked file points beside it, and its data says where it is from."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

# Spelled in two parts so that this file does not match itself.
SIBLING_DIRECTORY = "../" + "shared"
# npm lockfiles list package contents as npm publishes them; they are not read by the project.
LOCKFILES = ("tests/clients/npm/package-lock.json",)
# Third-party data bundled for the examples and the tests: each folder names its source and licence.
DATA_FOLDERS = {
    "data/plaut-mc": ("README.md", "LICENSE", "runs.csv.gz", "prices.yaml"),
    "data/paper-curves": ("README.md", "LICENSE", "mmlu/cost_grid.npy"),
    "tests/fixtures/upstream": ("README.md", "native_smol_top15.json"),
}


def tracked_files(repo_root: Path) -> list[str]:
    """Every file git tracks in the checkout."""
    if shutil.which("git") is None or not (repo_root / ".git").exists():
        pytest.fail("this test needs a git checkout of the repository (git ls-files)")
    listing = subprocess.run(
        ["git", "ls-files", "-z"], cwd=repo_root, capture_output=True, check=True
    ).stdout.decode()
    return [name for name in listing.split("\0") if name]


def test_no_tracked_file_refers_to_a_directory_beside_the_repository(repo_root: Path) -> None:
    offenders = []
    for name in tracked_files(repo_root):
        path = repo_root / name
        if name in LOCKFILES or not path.is_file():
            continue
        if SIBLING_DIRECTORY.encode() in path.read_bytes():
            offenders.append(name)
    assert offenders == [], f"these files refer to {SIBLING_DIRECTORY}: {offenders}"


@pytest.mark.parametrize("folder", sorted(DATA_FOLDERS))
def test_bundled_data_is_tracked_with_its_source_and_licence(repo_root: Path, folder: str) -> None:
    tracked = set(tracked_files(repo_root))
    for name in DATA_FOLDERS[folder]:
        assert f"{folder}/{name}" in tracked, f"{folder}/{name} is not tracked"
    readme = (repo_root / folder / "README.md").read_text()
    assert "Source" in readme or "source" in readme, f"{folder}/README.md does not name its source"
    assert "licen" in readme.lower(), f"{folder}/README.md does not name its licence"
