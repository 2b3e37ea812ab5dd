"""What every judge is: an async ``judge(question, reference, answer) -> Verdict``."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

REFERENCE_JUDGE = "reference"


class JudgeError(Exception):
    """A judge could not label (its model call failed, a missing extra); the label is then missing.

    ``cost_usd``: what the failed call is charged all the same (``money.charges``: a call that
    may have been served, e.g. one that timed out, is charged its worst case): shadow cost.
    """

    def __init__(self, message: str, *, cost_usd: float = 0.0):
        super().__init__(message)
        self.cost_usd = cost_usd


@dataclass(frozen=True)
class Verdict:
    """One label.

    Attributes:
        correct: agreement with the reference answer in [0, 1]; None when the judge cannot tell
            (e.g. the reference answer has no number for the ``numeric`` judge): a missing label.
        judge: the judge's name, stored with the row.
        cost_usd: what judging cost (the ``llm`` judge's call; 0 otherwise): shadow cost.
        detail: the raw evidence (cosine, P(yes), the extracted values), for logs and tests.
    """

    correct: float | None
    judge: str
    cost_usd: float = 0.0
    detail: str = ""


class Judge(Protocol):
    """Labels one answer against the reference answer to the same question."""

    name: str

    async def judge(self, question: str, reference: str, answer: str) -> Verdict:
        """The verdict; raises ``JudgeError`` when it cannot be reached."""
        ...


async def label_answers(
    judge: Judge, question: str, reference_model: str, answers: Mapping[str, str]
) -> dict[str, Verdict | JudgeError]:
    """Label every model's answer of one query against ``answers[reference_model]``, concurrently.

    The reference model agrees with itself by definition (label 1, no judge call). A model whose
    judging failed gets the ``JudgeError`` instead of a verdict: its label is missing, not 0.
    """
    reference = answers[reference_model]
    others = [m for m in answers if m != reference_model]

    async def one(model: str) -> Verdict | JudgeError:
        try:
            return await judge.judge(question, reference, answers[model])
        except JudgeError as exc:
            return exc

    results = await asyncio.gather(*(one(m) for m in others))
    labels: dict[str, Verdict | JudgeError] = {reference_model: Verdict(1.0, REFERENCE_JUDGE)}
    labels.update(zip(others, results, strict=True))
    return labels
