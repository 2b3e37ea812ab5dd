"""Answer equivalence for the ``consistency`` scorer: the traffic judges' rules as plain predicates.

``policies.blackbox.consistency_score`` takes an ``equivalent(answer, sample) -> bool``; the policy
names the rule (``ScorerSpec.equivalence``) and this module gives it: the same normalizers and
thresholds as the ``exact``, ``numeric``, ``choice`` and ``similarity`` judges, with the stage's
answer in the place of the reference. A sample is equivalent only when the rule says so: when the
answer itself has nothing to compare (no number, no letter, empty text) no sample agrees with it.
"""

from __future__ import annotations

from policies.blackbox import EQUIVALENCES, Equivalent
from traffic.judges.similarity import cosine, load_encoder
from traffic.judges.text import choice_agreement, exact_agreement, numeric_agreement

# The similarity judge's default threshold (traffic.judges.config.SimilarityJudgeConfig).
SIMILARITY_THRESHOLD = 0.8


def _exact(answer: str, sample: str) -> bool:
    return exact_agreement(answer, sample) == 1.0


def _numeric(answer: str, sample: str) -> bool:
    return numeric_agreement(answer, sample) == 1.0


def _choice(answer: str, sample: str) -> bool:
    return choice_agreement(answer, sample) == 1.0


def _similarity(answer: str, sample: str) -> bool:
    # Loads all-MiniLM-L6-v2 on first use; JudgeError naming the install step when it is missing.
    if not answer.strip():
        return False
    return cosine(load_encoder(), answer, sample) >= SIMILARITY_THRESHOLD


_RULES: dict[str, Equivalent] = {
    "exact": _exact,
    "numeric": _numeric,
    "choice": _choice,
    "similarity": _similarity,
}


def equivalence(name: str) -> Equivalent:
    """The predicate of one equivalence rule (``exact``, ``numeric``, ``choice``, ``similarity``)."""
    try:
        return _RULES[name]
    except KeyError:
        raise ValueError(f"unknown equivalence {name!r}; choose one of {', '.join(EQUIVALENCES)}") from None
