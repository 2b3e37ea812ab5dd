"""The test policy (``gateway_testkit.POLICY_DOCUMENT``) with changes, and as a policy file."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from policies import build_policy, save_policy
from tests.support.gateway_testkit import POLICY_DOCUMENT


def policy_document(
    tier_changes: Mapping[str, Mapping[str, Any]] | None = None, **changes: Any
) -> dict[str, Any]:
    """A copy of the test policy: ``changes`` replace top-level fields, ``tier_changes`` replace
    fields of the named tiers (e.g. ``{"balanced": {"routes": [...]}}``)."""
    document = copy.deepcopy(POLICY_DOCUMENT)
    document.update(copy.deepcopy(changes))
    document.pop("policy_id", None)
    for tier, fields in (tier_changes or {}).items():
        document["tiers"][tier].update(copy.deepcopy(dict(fields)))
    return document


def write_policy(
    path: Path, tier_changes: Mapping[str, Mapping[str, Any]] | None = None, **changes: Any
) -> Path:
    """Save ``policy_document(tier_changes, **changes)`` (built and stamped) to ``path``; ``path``."""
    save_policy(build_policy(policy_document(tier_changes, **changes)), path)
    return path


def two_model_document(
    threshold: float = 0.4,
    *,
    small_cost_usd: float = 0.0001,
    large_cost_usd: float = 0.001,
    max_cost_usd: float = 0.0006,
    expected_cost_usd: float = 0.0005,
    scorer: Mapping[str, Any] | None = None,
    envelope: bool = False,
) -> dict[str, Any]:
    """The smallest valid policy document: ``small`` (quality 0.5) escalating to ``large`` (0.8) at
    ``threshold`` in the one tier ``balanced``; with ``scorer`` set, and with an envelope point of
    that route when ``envelope``."""
    document: dict[str, Any] = {
        "models": {
            "small": {"mean_cost_usd": small_cost_usd, "quality": 0.5},
            "large": {"mean_cost_usd": large_cost_usd, "quality": 0.8},
        },
        "default_tier": "balanced",
        "tiers": {
            "balanced": {
                "objective": {"max_cost_usd": max_cost_usd},
                "routes": [{"weight": 1.0, "models": ["small", "large"], "thresholds": [threshold]}],
                "expected": {"cost_usd": expected_cost_usd, "quality": 0.7, "escalation_rate": 0.4},
            }
        },
    }
    if scorer is not None:
        document["scorer"] = dict(scorer)
    if envelope:
        point = {"cost_usd": 0.0004, "quality": 0.7, "models": ["small", "large"], "thresholds": [threshold]}
        document["envelope"] = [point]
    return document


def heldout_expectation(
    cost_usd: tuple[float, float, float],
    quality: tuple[float, float, float],
    escalation_rate: tuple[float, float, float],
) -> dict[str, Any]:
    """A tier's ``expected.heldout`` block (50 splits of halves, seed 0): each measure as (mean,
    low, high)."""
    block: dict[str, Any] = {"splits": 50, "test_fraction": 0.5, "seed": 0}
    for name, (mean, low, high) in (
        ("cost_usd", cost_usd),
        ("quality", quality),
        ("escalation_rate", escalation_rate),
    ):
        block[name] = {"mean": mean, "low": low, "high": high}
    return block


def bounds_expectation(
    quality_min: float, cost_max: float, escalation: tuple[float, float], confidence: float = 0.95
) -> dict[str, Any]:
    """A tier's ``expected.bounds`` block (``policies.schema.Bounds``) as ``cascade calibrate``
    writes it: split on 200 + 200 queries, Clopper-Pearson for 0/1 measures, Hoeffding-Bentkus for cost."""
    return {
        "confidence": confidence,
        "method": "split",
        "n": 200,
        "selection_n": 200,
        "seed": 0,
        "statements": 4,
        "estimators": {
            "quality": "clopper-pearson",
            "cost_usd": "hoeffding-bentkus",
            "escalation_rate": "clopper-pearson",
        },
        "quality_min": quality_min,
        "cost_max": cost_max,
        "cost_range": 0.002,
        "escalation": list(escalation),
    }
