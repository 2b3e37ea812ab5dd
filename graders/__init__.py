"""Graders: turn a model's answer text into quality in [0, 1] against the labelled answer.

* ``multiple_choice``: the answer letter (``"B"``, ``"(B)"``, ``"B. Paris"``, ``"The answer is B"``).
* ``exact_match``: normalized text equality with the answer or any alias (case, punctuation,
  articles and whitespace ignored).
* ``numeric``: the last number in the answer equals the label within a relative tolerance.
* ``final_numeric``: for answers that reason before concluding: the number after the last final-answer
  marker (``Answer: 42``, ``the answer is 42``, ``\\boxed{42}``, ``#### 42``), else the last number;
  equal to the label within a relative tolerance.
* ``tool_call``: the answer's calls (JSON list of ``{"name", "arguments"}``) against accepted calls
  in the Berkeley Function Calling Leaderboard's form (``graders.tool_call``).
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Callable, Sequence

from graders.tool_call import ToolCallLabelError, grade_tool_call

_LEADING_LETTER = re.compile(r"^\s*[\(\[]?([A-J])(?:[\)\]\.:,]|\s|$)")
_ANSWER_IS = re.compile(r"answer\s*(?:is|:)?\s*[\(\[]?([A-J])\b", re.IGNORECASE)
_LONE_LETTER = re.compile(r"\b([A-J])\b")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# A final-answer marker and the number after it (markdown emphasis, "$" and "=" allowed between).
_FINAL_MARKER = re.compile(
    r"(?:answer\s*(?:is|:)|\\boxed\{|####)[\s*:=$]*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)",
    re.IGNORECASE,
)


class GraderError(ValueError):
    """Unknown grader or an unusable label."""


def extract_choice(response: str, letters: str = "ABCD") -> str | None:
    """The answer letter a response gives, or None.

    Tries, in order: a leading letter (``B``, ``(B)``, ``B.``), ``answer is B``, then a lone
    capital letter anywhere; only letters in ``letters`` count.
    """
    text = response.strip()
    for pattern in (_LEADING_LETTER, _ANSWER_IS, _LONE_LETTER):
        for match in pattern.finditer(text):
            letter = match.group(1).upper()
            if letter in letters:
                return letter
    return None


def grade_multiple_choice(
    response: str, answer: str, aliases: Sequence[str] = (), letters: str = "ABCD"
) -> float:
    """1.0 if the response picks the labelled letter, else 0.0."""
    label = answer.strip().upper()
    if label not in letters:
        raise GraderError(f"multiple-choice label {answer!r} is not one of {letters}")
    return 1.0 if extract_choice(response, letters) == label else 0.0


def normalize_text(text: str) -> str:
    """Lower case, no punctuation, no English articles, single spaces."""
    lowered = text.lower()
    no_punct = "".join(ch for ch in lowered if ch not in string.punctuation)
    return " ".join(_ARTICLES.sub(" ", no_punct).split())


def grade_exact_match(response: str, answer: str, aliases: Sequence[str] = ()) -> float:
    """1.0 if the normalized response (or its first line) equals the answer or an alias."""
    targets = {normalize_text(t) for t in (answer, *aliases)} - {""}
    if not targets:
        raise GraderError("exact-match label is empty")
    first_line = response.strip().splitlines()[0] if response.strip() else ""
    return 1.0 if {normalize_text(response), normalize_text(first_line)} & targets else 0.0


def extract_number(response: str) -> float | None:
    """The last number in the response (thousands separators ignored), or None."""
    matches = _NUMBER.findall(response.replace(",", ""))
    return float(matches[-1]) if matches else None


def grade_numeric(response: str, answer: str, aliases: Sequence[str] = (), rel_tol: float = 1e-6) -> float:
    """1.0 if the last number in the response equals the label (relative tolerance ``rel_tol``)."""
    try:
        target = float(str(answer).replace(",", ""))
    except ValueError as exc:
        raise GraderError(f"numeric label {answer!r} is not a number") from exc
    value = extract_number(response)
    if value is None:
        return 0.0
    return 1.0 if math.isclose(value, target, rel_tol=rel_tol, abs_tol=1e-9) else 0.0


def extract_final_number(response: str) -> float | None:
    """The number a reasoned answer concludes with, or None.

    The number after the LAST final-answer marker (``Answer: 42``, ``The answer is 42``,
    ``\\boxed{42}``, ``#### 42``; thousands separators ignored), so intermediate results of a chain
    of thought do not count; without a marker, the last number in the response.
    """
    text = response.replace(",", "")
    markers = _FINAL_MARKER.findall(text)
    if markers:
        return float(markers[-1])
    return extract_number(text)


def grade_final_numeric(
    response: str, answer: str, aliases: Sequence[str] = (), rel_tol: float = 1e-6
) -> float:
    """1.0 if the response's final number (``extract_final_number``) equals the label."""
    try:
        target = float(str(answer).replace(",", ""))
    except ValueError as exc:
        raise GraderError(f"numeric label {answer!r} is not a number") from exc
    value = extract_final_number(response)
    if value is None:
        return 0.0
    return 1.0 if math.isclose(value, target, rel_tol=rel_tol, abs_tol=1e-9) else 0.0


GRADERS: dict[str, Callable[..., float]] = {
    "multiple_choice": grade_multiple_choice,
    "exact_match": grade_exact_match,
    "numeric": grade_numeric,
    "final_numeric": grade_final_numeric,
    "tool_call": grade_tool_call,
}


def grade(grader: str, response: str, answer: str, aliases: Sequence[str] = ()) -> float:
    """Apply the named grader; ``GraderError`` for an unknown name."""
    try:
        function = GRADERS[grader]
    except KeyError:
        raise GraderError(f"unknown grader {grader!r}; known: {', '.join(GRADERS)}") from None
    try:
        return function(response, answer, aliases)
    except ToolCallLabelError as exc:
        raise GraderError(str(exc)) from exc
