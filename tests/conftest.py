"""Fixtures shared by every test package (more in the plugin tests/support/fixtures.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# The scripted upstream and traffic store fixtures and the other shared helpers live in tests/support/.
pytest_plugins = ["tests.support.fixtures", "tests.support.traffic_stores"]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository root."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The shared data directory, checked out beside the repository (``../shared``)."""
    path = (REPO_ROOT.parent / "shared").resolve()
    if not path.is_dir():
        pytest.fail(f"shared data not found at {path}: check out ../shared beside the repository")
    return path
