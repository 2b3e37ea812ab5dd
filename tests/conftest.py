"""Fixtures shared by every test package (more in the plugin tests/support/fixtures.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# The scripted upstream, traffic store and real local pool fixtures and the other shared helpers
# live in tests/support/.
pytest_plugins = [
    "tests.support.fixtures",
    "tests.support.traffic_stores",
    "tests.support.local_pool",
    "tests.support.phoenix",
]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """After a run of the fault matrix (tests/gateway/test_fault_matrix.py, and its Redis cases in
    tests/reliability/test_rate_limits_redis_pause.py): its cell count and its failing cells by
    fault, call, endpoint and invariant, and the limit cases; after a run of the fail-over suite
    (tests/gateway/test_failover_suite.py): its table of verdicts."""
    from tests.support.failover_suite import RECORD as FAILOVER
    from tests.support.fault_matrix import RECORD

    if RECORD.outcomes or RECORD.limits:
        terminalreporter.section("fault matrix")
        for line in RECORD.summary():
            terminalreporter.write_line(line)
    if FAILOVER.verdicts:  # tests/gateway/test_failover_suite.py: scenario x API x streamed -> verdict
        terminalreporter.section("fail-over suite")
        for line in FAILOVER.table():
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository root."""
    return REPO_ROOT


@pytest.fixture
def policy_document() -> dict[str, Any]:
    """A small valid policy document without policy_id/created_at (tests/policies, tests/publishing)."""
    return {
        "schema_version": 1,
        "scorer": {"name": "mean_token_negentropy", "top_k": 5},
        "models": {
            "small": {"mean_cost_usd": 0.0001, "quality": 0.5},
            "large": {"mean_cost_usd": 0.001, "quality": 0.8},
        },
        "default_tier": "balanced",
        "tiers": {
            "balanced": {
                "objective": {"max_cost_usd": 0.0006},
                "routes": [{"weight": 1.0, "models": ["small", "large"], "thresholds": [0.4]}],
                "expected": {"cost_usd": 0.0005, "quality": 0.7, "escalation_rate": 0.4},
                "shadow_price": 250.0,
            },
            "economy": {
                "objective": {"min_quality": 0.55},
                "routes": [
                    {"weight": 0.25, "models": ["small"], "thresholds": []},
                    {"weight": 0.75, "models": ["small", "large"], "thresholds": [0.2]},
                ],
                "expected": {"cost_usd": 0.0002, "quality": 0.55, "escalation_rate": 0.1},
                "shadow_price": None,
            },
        },
        "envelope": [
            {"cost_usd": 0.0001, "quality": 0.5, "models": ["small"], "thresholds": []},
            {"cost_usd": 0.0005, "quality": 0.7, "models": ["small", "large"], "thresholds": [0.4]},
            {"cost_usd": 0.001, "quality": 0.8, "models": ["large"], "thresholds": []},
        ],
    }
