"""What tests/e2e/test_local_cascade.py and test_messages_local_cascade.py share (with the session
fixtures ``cascade_pool`` and ``cheap_scores`` of tests/e2e/conftest.py): the two pool models, the
questions, the request every question is asked as, and the threshold that splits the cheap model's
scores."""

from __future__ import annotations

import itertools
from typing import Any

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
