"""Judges that compare the extracted answers as text: ``exact``, ``numeric``, ``choice``.

They reuse the normalizers of ``graders`` (the reference answer plays the label). When
nothing can be extracted from the reference (no number, no letter, empty text) the label is missing
(None): the reference gave no answer to agree with.
"""

from __future__ import annotations

import math
import re
import string

from graders import extract_choice, extract_final_number, normalize_text
from traffic.judges.base import Verdict


def _first_line(text: str) -> str:
    stripped = text.strip()
    return stripped.splitlines()[0] if stripped else ""


# The conclusion of a step-by-step answer: what follows the last "Answer:" / "the answer is".
_FINAL_ANSWER = re.compile(r"answer\s*(?:is|:)\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


def _final_answer(text: str) -> str:
    """The text after the last final-answer marker ("Answer: 42" -> "42"), or "" when there is none."""
    matches = _FINAL_ANSWER.findall(text)
    return matches[-1] if matches else ""


def _normalized(text: str) -> str:
    """``normalize_text``, or, when that leaves nothing but the text had words, the same with the
    articles kept: an answer that IS an article (the letter ``A`` of a multiple-choice answer) is
    an answer, not an empty one."""
    normalized = normalize_text(text)
    if normalized:
        return normalized
    return " ".join("".join(ch for ch in text.lower() if ch not in string.punctuation).split())


def exact_agreement(reference: str, answer: str) -> float | None:
    """1.0 if the normalized answers, their first lines or their final answers are equal, else 0.0;
    None when the reference normalizes to nothing (``ExactJudge``'s rule)."""
    forms = (
        _normalized(reference),
        _normalized(_first_line(reference)),
        _normalized(_final_answer(reference)),
    )
    targets = set(forms) - {""}
    if not targets:
        return None
    candidates = {
        _normalized(answer),
        _normalized(_first_line(answer)),
        _normalized(_final_answer(answer)),
    }
    candidates.discard("")
    return 1.0 if candidates & targets else 0.0


def numeric_agreement(reference: str, answer: str, rel_tol: float = 1e-6) -> float | None:
    """1.0 if the final numbers agree within ``rel_tol``, else 0.0 (also when only the answer has
    none); None when the reference has no number (``NumericJudge``'s rule)."""
    expected = extract_final_number(reference)
    if expected is None:
        return None
    value = extract_final_number(answer)
    if value is None:
        return 0.0
    return 1.0 if math.isclose(value, expected, rel_tol=rel_tol, abs_tol=1e-9) else 0.0


def choice_agreement(reference: str, answer: str, letters: str = "ABCD") -> float | None:
    """1.0 if both pick the same letter, else 0.0; None when the reference picks none (``ChoiceJudge``)."""
    expected = extract_choice(reference, letters)
    if expected is None:
        return None
    return 1.0 if extract_choice(answer, letters) == expected else 0.0


class ExactJudge:
    """1 if the normalized answers, their first lines or their final answers are equal (case,
    punctuation, articles ignored). The final answer is what follows the last "Answer:" or "the
    answer is", so that a step-by-step answer is compared by its conclusion with a bare one."""

    name = "exact"

    async def judge(self, question: str, reference: str, answer: str) -> Verdict:
        """Compare normalized text; missing when the reference normalizes to nothing."""
        correct = exact_agreement(reference, answer)
        if correct is None:
            return Verdict(None, self.name, detail="empty reference answer")
        return Verdict(correct, self.name)


class NumericJudge:
    """1 if the final numbers of both answers are equal within ``rel_tol``.

    The final number is the grader ``final_numeric``'s: the number after the last final-answer
    marker (``Answer: 42``, ``the answer is 42``, ``\\boxed{42}``, ``#### 42``), else the last number,
    so a step-by-step answer is read at its conclusion, not at an intermediate result.
    """

    name = "numeric"

    def __init__(self, rel_tol: float = 1e-6):
        self.rel_tol = rel_tol

    async def judge(self, question: str, reference: str, answer: str) -> Verdict:
        """Compare the final numbers; missing when the reference has none, 0 when only the answer has none."""
        expected = extract_final_number(reference)
        if expected is None:
            return Verdict(None, self.name, detail="no number in the reference answer")
        value = extract_final_number(answer)
        if value is None:
            return Verdict(0.0, self.name, detail=f"reference {expected:g}, no number in the answer")
        correct = numeric_agreement(reference, answer, self.rel_tol)
        return Verdict(correct, self.name, detail=f"reference {expected:g}, answer {value:g}")


class ChoiceJudge:
    """1 if both answers pick the same letter (``B``, ``(B)``, ``The answer is B``)."""

    name = "choice"

    def __init__(self, letters: str = "ABCD"):
        self.letters = letters

    async def judge(self, question: str, reference: str, answer: str) -> Verdict:
        """Compare the answer letters; missing when the reference picks none."""
        expected = extract_choice(reference, self.letters)
        if expected is None:
            return Verdict(None, self.name, detail="no answer letter in the reference answer")
        picked = extract_choice(answer, self.letters)
        return Verdict(
            choice_agreement(reference, answer, self.letters),
            self.name,
            detail=f"reference {expected}, answer {picked}",
        )
