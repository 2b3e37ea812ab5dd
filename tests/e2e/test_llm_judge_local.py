"""The llm judge against a real llama-server model of the local pool (the reference model)."""

from __future__ import annotations

import pytest

from money import Price
from tests.support.local_pool import LocalPool
from traffic.judges.llm import LLMJudge

pytestmark = pytest.mark.e2e
JUDGE = "qwen2.5-coder-1.5b"
AGREEING = [
    ("What is the capital of France?", "Paris", "The capital of France is Paris."),
    ("How many legs does a spider have?", "8", "A spider has eight legs."),
    ("What is 12 times 12?", "144", "12 x 12 = 144"),
]
DISAGREEING = [
    ("What is the capital of France?", "Paris", "The capital of France is Berlin."),
    ("How many legs does a spider have?", "8", "A spider has six legs."),
    ("What is 12 times 12?", "144", "12 x 12 = 124"),
]


@pytest.fixture(scope="module")
def judge_url(local_pool: LocalPool) -> str:
    """The judge model's server in the session's pool (a free port): its /v1 base URL."""
    local_pool.serve([JUDGE])
    return f"{local_pool.url(JUDGE)}/v1"


async def test_real_judge_says_yes_to_agreeing_answers_and_no_to_contradictions(judge_url: str) -> None:
    judge = LLMJudge(
        judge_url, JUDGE, price=Price(per_query_usd=0), timeout_s=120
    )  # what it costs is not tested here
    try:
        agree = [await judge.judge(*pair) for pair in AGREEING]
        disagree = [await judge.judge(*pair) for pair in DISAGREEING]
    finally:
        await judge.aclose()
    agree_labels = [v.correct for v in agree]
    disagree_labels = [v.correct for v in disagree]
    assert None not in agree_labels and None not in disagree_labels, (agree, disagree)
    # Each agreeing pair is labelled above the contradicting pair of the same question.
    for yes, no in zip(agree_labels, disagree_labels, strict=True):
        assert yes > no, (agree, disagree)
    # No absolute cut: this 1.5B judge leans to "yes" (contradictions got 0.34-0.79 when measured, the
    # agreeing pairs 0.98-0.99), so only the order is a property of the judge worth asserting.
    print(
        "agreeing",
        [round(x, 3) for x in agree_labels],
        "contradicting",
        [round(x, 3) for x in disagree_labels],
    )
