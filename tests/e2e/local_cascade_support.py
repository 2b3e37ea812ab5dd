"""What tests/e2e/test_local_cascade.py and test_messages_local_cascade.py share (with the session
fixtures ``cascade_pool`` and ``cheap_scores`` of tests/e2e/conftest.py): the two pool models, the
questions, the request every question is asked as, and the threshold that splits the cheap model's
scores; the policy over the two models that both serve (test_demo.py's too)."""

from __future__ import annotations

import itertools
from typing import Any

from policies import Policy, build_policy

CHEAP, STRONG = "smollm2-135m", "qwen2.5-coder-0.5b"
TOP_K = 10
QUESTIONS = [
    "What is the capital of France?",
    "Say hello.",
    "What is 2 + 2?",
    "Name a colour.",
    "Continue the sequence: qz7, vv, 9k,",
    "Translate 'Schmetterling' into Basque, then explain its etymology.",
]


def chat_body(question: str) -> dict[str, Any]:
    """The chat request of one question: one user turn, 8 tokens, temperature 0."""
    return {"messages": [{"role": "user", "content": question}], "max_tokens": 8, "temperature": 0}


def threshold_of(scores: dict[str, float]) -> tuple[float, float]:
    """Midpoint of the widest gap between the sorted scores, and that gap."""
    ordered = sorted(scores.values())
    gap, index = max((b - a, i) for i, (a, b) in enumerate(itertools.pairwise(ordered)))
    return (ordered[index] + ordered[index + 1]) / 2, gap


def two_model_policy(
    threshold: float,
    *,
    top_k: int = TOP_K,
    qualities: tuple[float, float] = (0.3, 0.5),
    expected_quality: float = 0.4,
) -> Policy:
    """A one-tier (``balanced``) policy that accepts the cheap model's answer at ``threshold`` and
    escalates to the strong one otherwise, mean token negentropy over ``top_k``; ``qualities``: the
    cheap and the strong model's."""
    route = {"models": [CHEAP, STRONG], "thresholds": [threshold]}
    return build_policy(
        {
            "schema_version": 1,
            "scorer": {"name": "mean_token_negentropy", "top_k": top_k},
            "models": {
                CHEAP: {"mean_cost_usd": 1e-6, "quality": qualities[0]},
                STRONG: {"mean_cost_usd": 5e-6, "quality": qualities[1]},
            },
            "default_tier": "balanced",
            "tiers": {
                "balanced": {
                    "objective": {"max_cost_usd": 1e-5},
                    "routes": [{"weight": 1.0, **route}],
                    "expected": {"cost_usd": 3e-6, "quality": expected_quality, "escalation_rate": 0.5},
                    "shadow_price": 1.0,
                }
            },
            "envelope": [{"cost_usd": 3e-6, "quality": expected_quality, **route}],
        }
    )
