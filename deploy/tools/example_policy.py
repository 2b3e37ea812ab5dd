"""Write deploy/config/policy.json: the example policy shipped with the image and the manifests.

Its numbers are placeholders shaped like `cascade calibrate` output for the two models of
deploy/config/gateway.yaml; replace the file with a policy calibrated on your own runs.

    .venv/bin/python deploy/tools/example_policy.py deploy/config/policy.json
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from policies.store import build_policy, save_policy

_SMALL_DECILES = [0.42, 0.55, 0.63, 0.70, 0.76, 0.81, 0.86, 0.90, 0.94]

DOCUMENT: dict[str, Any] = {
    "schema_version": 1,
    "created_at": "2026-01-01T00:00:00+00:00",
    "scorer": {"name": "mean_token_negentropy", "top_k": 15},
    "models": {
        "small": {"mean_cost_usd": 0.00001, "quality": 0.40},
        "large": {"mean_cost_usd": 0.00005, "quality": 0.55},
    },
    "default_tier": "balanced",
    "tiers": {
        "economy": {
            "objective": {"max_cost_usd": 0.00002},
            "routes": [{"weight": 1.0, "models": ["small", "large"], "thresholds": [0.35]}],
            "expected": {"cost_usd": 0.00002, "quality": 0.46, "escalation_rate": 0.2},
            "shadow_price": 9000.0,
            # Streamed requests start at the cheap model's speed: decided on its first 4 tokens.
            "commit": {"rule": "prefix", "tokens": 4},
        },
        "balanced": {
            "objective": {"max_cost_usd": 0.00004},
            "routes": [{"weight": 1.0, "models": ["small", "large"], "thresholds": [0.55]}],
            "expected": {"cost_usd": 0.00003, "quality": 0.52, "escalation_rate": 0.45},
            "shadow_price": 4000.0,
        },
        "quality": {
            "objective": {"min_quality": 0.55},
            "routes": [{"weight": 1.0, "models": ["large"], "thresholds": []}],
            "expected": {"cost_usd": 0.00005, "quality": 0.55, "escalation_rate": 0.0},
            "shadow_price": None,
        },
    },
    "envelope": [
        {"cost_usd": 0.00001, "quality": 0.40, "models": ["small"], "thresholds": []},
        {"cost_usd": 0.00002, "quality": 0.46, "models": ["small", "large"], "thresholds": [0.35]},
        {"cost_usd": 0.00003, "quality": 0.52, "models": ["small", "large"], "thresholds": [0.55]},
        {"cost_usd": 0.00005, "quality": 0.55, "models": ["large"], "thresholds": []},
    ],
    # Deciles of the small model's scores on the calibration rows; it is the first stage of both
    # cascading tiers, so each tier expects a tenth of its live scores in each bin.
    "score_distribution": {
        "calibration_rows": 1000,
        "models": {"small": {"edges": _SMALL_DECILES, "proportions": [0.1] * 10}},
        "tiers": {"economy": {"small": [0.1] * 10}, "balanced": {"small": [0.1] * 10}},
    },
}


def main(path: str) -> None:
    """Validate the example document, stamp its policy_id and write it atomically to ``path``."""
    save_policy(build_policy(DOCUMENT), Path(path))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "deploy/config/policy.json")
