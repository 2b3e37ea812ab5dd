"""A pytest plugin for tests/test_markers.py: ``-p tests.support.marker_report`` writes, once the
tests are collected, each test's node id and the names of its markers as JSON to the file that
``$CASCADE_MARKER_REPORT`` names (markers added at collection included, as ``-m`` sees them)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


@pytest.hookimpl(trylast=True)  # after every hook that adds markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Write the report (nothing without ``$CASCADE_MARKER_REPORT``)."""
    destination = os.environ.get("CASCADE_MARKER_REPORT")
    if destination:
        report = {item.nodeid: sorted({mark.name for mark in item.iter_markers()}) for item in items}
        Path(destination).write_text(json.dumps(report), encoding="utf-8")
