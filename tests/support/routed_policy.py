"""A routed test policy's parts (``gateway_testkit.POLICY_DOCUMENT`` plus a router).

The router reads the ``cheap-v1`` features; its coefficients make the word "hard" (its hashed
bucket) drive the small model's predicted correctness to ~0, so an easy and a hard prompt take
different routes (tests/gateway/test_routed_tiers.py). ``minilm_policy``: a tier routed on the
``minilm-v1`` embedding (its coefficients zero: one route for every prompt).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from policies.route_features import HASH_DIMS, feature_dims

EASY = [{"role": "user", "content": "What is two plus two?"}]
HARD = [{"role": "user", "content": "A hard question: integrate x squared"}]
SMALL_INTERCEPT = 2.0  # p_small = sigmoid(2) = 0.881 on a prompt without "hard"
LARGE_INTERCEPT = 1.0  # p_large = 0.731 everywhere


def router_section(features: str = "cheap-v1") -> dict[str, Any]:
    """A router over small/medium/large whose small model fails prompts containing "hard"."""
    dims = feature_dims(features)
    small = [0.0] * dims
    if features == "cheap-v1":
        small[zlib.crc32(b"hard") % HASH_DIMS] = -40.0
    return {
        "features": features,
        "models": ["small", "medium", "large"],
        "cost_usd": [0.00001, 0.0001, 0.001],
        "coef": [small, [0.0] * dims, [0.0] * dims],
        "intercept": [SMALL_INTERCEPT, -5.0, LARGE_INTERCEPT],
    }


ROUTED = {"mechanism": "routed", "price_weight": 100.0}
HYBRID = {"mechanism": "hybrid", "models": ["small", "large"], "threshold": 0.5, "direct_below": 0.5}


def minilm_policy(write_policy: Callable[..., Path]) -> Path:
    """The test policy with tier ``balanced`` routed by a ``minilm-v1`` router (written by the
    ``write_policy`` fixture): every prompt routes to ``small`` (p_small 0.881)."""
    return write_policy(tier_changes={"balanced": {"routing": ROUTED}}, router=router_section("minilm-v1"))
