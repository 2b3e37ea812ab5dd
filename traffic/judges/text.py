"""Judges that compare the extracted answers as text: ``exact``, ``numeric``, ``choice``.

They reuse the normalizers of ``collection.graders`` (the reference answer plays the label). When
nothing can be extracted from the reference (no number, no letter, empty text) the label is missing
(None): the reference gave no answer to agree with.
"""

from __future__ import annotations

import math

from collection.graders import extract_choice, extract_number, normalize_text
from traffic.judges.base import Verdict


def _first_line(text: str) -> str:
    stripped = text.strip()
    return stripped.splitlines()[0] if stripped else ""


class ExactJudge:
    """1 if the normalized answers (or their first lines) are equal (case, punctuation, articles ignored)."""

    name = "exact"

    async def judge(self, question: str, reference: str, answer: str) -> Verdict:
        """Compare normalized text; missing when the reference normalizes to nothing."""
        targets = {normalize_text(reference), normalize_text(_first_line(reference))} - {""}
        if not targets:
            return Verdict(None, self.name, detail="empty reference answer")
        candidates = {normalize_text(answer), normalize_text(_first_line(answer))}
        return Verdict(1.0 if candidates & targets else 0.0, self.name)


class NumericJudge:
    """1 if the last numbers of both answers are equal within ``rel_tol``."""

    name = "numeric"

    def __init__(self, rel_tol: float = 1e-6):
        self.rel_tol = rel_tol

    async def judge(self, question: str, reference: str, answer: str) -> Verdict:
        """Compare the last numbers; missing when the reference has none, 0 when only the answer has none."""
        expected = extract_number(reference)
        if expected is None:
            return Verdict(None, self.name, detail="no number in the reference answer")
        value = extract_number(answer)
        if value is None:
            return Verdict(0.0, self.name, detail=f"reference {expected:g}, no number in the answer")
        same = math.isclose(value, expected, rel_tol=self.rel_tol, abs_tol=1e-9)
        return Verdict(1.0 if same else 0.0, self.name, detail=f"reference {expected:g}, answer {value:g}")


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
            1.0 if picked == expected else 0.0, self.name, detail=f"reference {expected}, answer {picked}"
        )
