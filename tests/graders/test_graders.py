"""Graders: answer letter, normalized exact match with aliases, numeric answers, reasoned answers."""

from __future__ import annotations

import pytest

from graders import GraderError, extract_choice, extract_final_number, grade


@pytest.mark.parametrize(
    ("response", "letter"),
    [
        ("B", "B"),
        (" B", "B"),
        ("(C)", "C"),
        ("D. Paris", "D"),
        ("A)", "A"),
        ("The answer is C.", "C"),
        ("Answer: b", "B"),
        ("I think D is right", "D"),
        ("E", None),  # not among A-D
        ("The capital", None),
        ("", None),
    ],
)
def test_extract_choice_finds_the_answer_letter(response: str, letter: str | None) -> None:
    assert extract_choice(response) == letter


def test_multiple_choice_scores_the_labelled_letter_only() -> None:
    assert grade("multiple_choice", "B.", "B") == 1.0
    assert grade("multiple_choice", "C", "B") == 0.0
    assert grade("multiple_choice", "Banana", "B") == 0.0  # a word starting with B is no letter


def test_multiple_choice_rejects_a_label_outside_the_letters() -> None:
    with pytest.raises(GraderError, match="not one of ABCD"):
        grade("multiple_choice", "A", "Z")


def test_exact_match_ignores_case_punctuation_articles_and_accepts_aliases() -> None:
    assert grade("exact_match", "The Eiffel Tower!", "eiffel tower") == 1.0
    assert grade("exact_match", "NYC", "New York City", ["NYC", "New York"]) == 1.0
    assert grade("exact_match", "Paris\nIt is the capital.", "paris") == 1.0  # first line counts
    assert grade("exact_match", "Lyon", "Paris", ["City of Light"]) == 0.0


def test_numeric_takes_the_last_number_with_tolerance() -> None:
    assert grade("numeric", "2 + 2 = 4", "4") == 1.0
    assert grade("numeric", "The total is 1,250.", "1250") == 1.0
    assert grade("numeric", "about 0.3333", "0.33333333") == 0.0  # beyond 1e-6 relative
    assert grade("numeric", "about 0.3333333", "0.33333333") == 1.0  # within
    assert grade("numeric", "3.0", "3") == 1.0
    assert grade("numeric", "no idea", "3") == 0.0


def test_unknown_grader_is_an_error() -> None:
    with pytest.raises(GraderError, match="unknown grader 'fuzzy'"):
        grade("fuzzy", "a", "a")


@pytest.mark.parametrize(
    ("response", "value"),
    [
        ("42", 42.0),
        ("17 * 3 = 51.\n51 + 9 = 60.\nAnswer: 60", 60.0),
        ("First 7*8 = 56, so the answer is 56. Check: 56 + 1 = 57", 56.0),
        ("The answer is **1,234**.", 1234.0),
        ("So $x = \\boxed{17}$, and 5 more.", 17.0),
        ("5 + 5 = 10\n#### 10", 10.0),
        ("Answer: $15", 15.0),
        ("answer: 3\nAnswer: -4.5 dollars", -4.5),
        ("no marker: 3 then 4", 4.0),
        ("no number at all", None),
    ],
)
def test_final_number_reads_the_conclusion_not_the_working(response: str, value: float | None) -> None:
    assert extract_final_number(response) == value


def test_final_numeric_grades_the_concluded_number_only() -> None:
    reasoning = "12 * 4 = 48. 48 + 7 = 55.\nAnswer: 55"
    assert grade("final_numeric", reasoning, "55") == 1.0
    assert grade("final_numeric", reasoning, "48") == 0.0  # an intermediate result is not the answer
    assert grade("final_numeric", "55", "55.0") == 1.0
    assert grade("final_numeric", "Answer: none", "55") == 0.0
    with pytest.raises(GraderError, match="not a number"):
        grade("final_numeric", "55", "fifty-five")
