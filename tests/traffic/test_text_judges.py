"""The text judges: exact, numeric and choice agreement with the reference answer."""

from __future__ import annotations

import pytest

from traffic.judges import JudgeError, Verdict, label_answers
from traffic.judges.text import ChoiceJudge, ExactJudge, NumericJudge


@pytest.mark.parametrize(
    ("reference", "answer", "expected"),
    [
        ("Paris", "paris.", 1.0),
        ("The Eiffel Tower", "eiffel tower", 1.0),
        ("Paris\nIt is the capital.", "Paris", 1.0),
        ("Paris", "Lyon", 0.0),
        ("Paris", "", 0.0),
        ("  ...  ", "Paris", None),  # the reference said nothing: no label, not a wrong answer
        ("A", "a.", 1.0),  # an answer that is an article (a choice letter) is still an answer
        ("A", "B", 0.0),
        ("A", "The", 0.0),
        ("12 * 3 = 36\n36 + 5 = 41\nAnswer: 41", "41", 1.0),  # a reasoned answer, by its conclusion
        ("Step 1: 6 * 7 = 42\nThe answer is Paris.", "Paris", 1.0),
        ("12 * 3 = 36\nAnswer: 41", "36", 0.0),  # an intermediate result is not the answer
        ("Answer: 41", "Answer: 14", 0.0),
    ],
)
async def test_exact_judge_compares_normalized_text(
    reference: str, answer: str, expected: float | None
) -> None:
    verdict = await ExactJudge().judge("q", reference, answer)
    assert verdict.correct == expected
    assert verdict.judge == "exact"


@pytest.mark.parametrize(
    ("reference", "answer", "expected"),
    [
        ("The total is 1,234.", "1234", 1.0),
        ("So x = 0.5", "x is 0.50", 1.0),
        ("42", "41", 0.0),
        ("42", "I do not know", 0.0),
        ("I do not know", "42", None),
    ],
)
async def test_numeric_judge_compares_the_last_numbers(
    reference: str, answer: str, expected: float | None
) -> None:
    assert (await NumericJudge().judge("q", reference, answer)).correct == expected


@pytest.mark.parametrize(
    ("reference", "answer", "expected"),
    [
        ("12 * 3 = 36\n36 + 5 = 41\nAnswer: 41", "41", 1.0),
        ("Answer: 41\n(check: 36 + 5)", "The answer is 41.", 1.0),  # the conclusion, not the last number
        ("12 * 3 = 36\nAnswer: 41", "36", 0.0),
        ("Step 1: 12 * 3 = 36", "36", 1.0),  # no marker: the last number
    ],
)
async def test_numeric_judge_reads_a_reasoned_answer_at_its_conclusion(
    reference: str, answer: str, expected: float
) -> None:
    assert (await NumericJudge().judge("q", reference, answer)).correct == expected


async def test_numeric_judge_tolerance_is_relative() -> None:
    assert (await NumericJudge(rel_tol=0.01).judge("q", "100", "100.5")).correct == 1.0
    assert (await NumericJudge(rel_tol=0.001).judge("q", "100", "100.5")).correct == 0.0


@pytest.mark.parametrize(
    ("reference", "answer", "expected"),
    [
        ("B", "(B) because", 1.0),
        ("The answer is C", "C. Paris", 1.0),
        ("A", "D", 0.0),
        ("A", "none of them", 0.0),
        ("I cannot tell", "A", None),
    ],
)
async def test_choice_judge_compares_answer_letters(
    reference: str, answer: str, expected: float | None
) -> None:
    assert (await ChoiceJudge().judge("q", reference, answer)).correct == expected


async def test_choice_judge_letters_are_configurable() -> None:
    assert (await ChoiceJudge("ABCDEFGHIJ").judge("q", "J", "J")).correct == 1.0
    assert (await ChoiceJudge("ABCD").judge("q", "J", "J")).correct is None


async def test_label_answers_gives_the_reference_1_and_keeps_judge_failures_missing() -> None:
    class Flaky:
        name = "flaky"

        async def judge(self, question: str, reference: str, answer: str) -> Verdict:
            if answer == "boom":
                raise JudgeError("judge unreachable")
            return Verdict(1.0 if answer == reference else 0.0, self.name)

    labels = await label_answers(Flaky(), "q", "large", {"small": "x", "medium": "boom", "large": "y"})
    assert labels["large"] == Verdict(1.0, "reference")
    assert labels["small"] == Verdict(0.0, "flaky")
    assert isinstance(labels["medium"], JudgeError)
