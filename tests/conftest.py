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
