"""Confidence scorers over OpenAI ``logprobs.content`` (DESIGN section 6).

Calibration applies these to recorded logprobs and the gateway to live ones: the same function on
both sides, so a threshold chosen offline means the same thing online. Higher score = more
confident. A response with no usable position has no score (``None``).

Input quirks handled (see shared/fixtures/upstream):

* llama.cpp's native server appends an end-of-text entry with an empty token to non-streamed
  answers (with alternatives; the OpenAI-compatible mode omits it, and so do streams). Trailing
  empty-token entries and any empty-token entry without alternatives are skipped, so the same
  answer scores the same whichever way it was fetched.
* A position with fewer than K alternatives is scored over those it has; one alternative says
  nothing about uncertainty and is skipped by the alternative-based scorers.
* Missing or null ``logprobs``/``top_logprobs`` give ``None`` rather than an error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from policies.errors import UnknownScorerError

TokenEntry = Mapping[str, Any]

# Alternatives with probability below exp(-inf) contribute nothing; -inf pads ragged rows.
_PAD = -np.inf


class TokenLogprobs:
    """Usable positions of one answer as arrays.

    Attributes:
        chosen: (P,) natural-log probability of each generated token.
        alternatives: (P, K) top-K logprobs per position, sorted descending, padded with -inf.
        counts: (P,) number of real alternatives per position (<= K).
    """

    __slots__ = ("alternatives", "chosen", "counts")

    def __init__(self, chosen: np.ndarray, alternatives: np.ndarray, counts: np.ndarray):
        self.chosen = chosen
        self.alternatives = alternatives
        self.counts = counts

    @classmethod
    def from_content(cls, content: Sequence[TokenEntry] | None, top_k: int) -> TokenLogprobs:
        """Extract usable positions from ``logprobs.content``, keeping at most ``top_k`` alternatives."""
        entries = _usable_entries(content or [])
        chosen = np.empty(len(entries), dtype=np.float64)
        alternatives = np.full((len(entries), max(top_k, 1)), _PAD, dtype=np.float64)
        counts = np.zeros(len(entries), dtype=np.int64)
        for row, entry in enumerate(entries):
            chosen[row] = _as_float(entry.get("logprob"))
            alts = [_as_float(a.get("logprob")) for a in entry.get("top_logprobs") or []]
            alts = sorted((a for a in alts if np.isfinite(a)), reverse=True)[:top_k]
            alternatives[row, : len(alts)] = alts
            counts[row] = len(alts)
        return cls(chosen, alternatives, counts)


def _as_float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _usable_entries(content: Sequence[TokenEntry]) -> list[TokenEntry]:
    entries = [e for e in content if isinstance(e, Mapping)]
    # Drop the end-of-text entry(ies) at the tail, then any empty, alternative-less entry.
    while entries and entries[-1].get("token", None) == "":
        entries.pop()
    return [e for e in entries if e.get("token", None) != "" or e.get("top_logprobs")]


def _token_negentropy(tokens: TokenLogprobs) -> np.ndarray:
    """(P',) TN_j = 1 - H_j / ln(n_j) over positions with n_j >= 2 alternatives."""
    informative = tokens.counts >= 2
    alts = tokens.alternatives[informative]
    if alts.shape[0] == 0:
        return np.empty(0)
    # Renormalize the top-K probabilities (softmax of the logprobs, stable under -inf padding).
    shifted = alts - alts[:, :1]
    weights = np.exp(shifted)
    probs = weights / weights.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(probs > 0, probs * np.log(probs), 0.0)
    entropy = -plogp.sum(axis=1)
    return 1.0 - entropy / np.log(tokens.counts[informative])


def _mean_token_negentropy(tokens: TokenLogprobs) -> float | None:
    tn = _token_negentropy(tokens)
    return float(tn.mean()) if tn.size else None


def _min_token_negentropy(tokens: TokenLogprobs) -> float | None:
    tn = _token_negentropy(tokens)
    return float(tn.min()) if tn.size else None


def _probability_margin(tokens: TokenLogprobs) -> float | None:
    informative = tokens.counts >= 2
    if not informative.any():
        return None
    top2 = np.exp(tokens.alternatives[informative, :2])
    return float((top2[:, 0] - top2[:, 1]).mean())


def _finite_chosen(tokens: TokenLogprobs) -> np.ndarray:
    return tokens.chosen[np.isfinite(tokens.chosen)]


def _min_probability(tokens: TokenLogprobs) -> float | None:
    chosen = _finite_chosen(tokens)
    return float(np.exp(chosen.min())) if chosen.size else None


def _mean_logprob(tokens: TokenLogprobs) -> float | None:
    chosen = _finite_chosen(tokens)
    return float(chosen.mean()) if chosen.size else None


def _sequence_probability(tokens: TokenLogprobs) -> float | None:
    mean = _mean_logprob(tokens)
    return None if mean is None else float(np.exp(mean))


SCORERS: dict[str, Callable[[TokenLogprobs], float | None]] = {
    "mean_token_negentropy": _mean_token_negentropy,
    "min_token_negentropy": _min_token_negentropy,
    "probability_margin": _probability_margin,
    "min_probability": _min_probability,
    "sequence_probability": _sequence_probability,
    "mean_logprob": _mean_logprob,
}


def score_logprobs(
    content: Sequence[TokenEntry] | None, scorer: str, top_k: int
) -> float | None:
    """Confidence of one answer from its ``choices[i].logprobs.content`` list.

    Args:
        content: the OpenAI token-logprob entries (``token``, ``logprob``, ``top_logprobs``).
        scorer: one of ``SCORERS`` (DESIGN section 6); ``external`` cannot be computed here.
        top_k: K, the number of alternatives the scorer uses per position.

    Returns:
        The score (higher = more confident), or None when no position is usable.
    """
    try:
        function = SCORERS[scorer]
    except KeyError:
        raise UnknownScorerError(
            f"scorer {scorer!r} cannot be computed from logprobs; "
            f"choose one of {', '.join(SCORERS)}"
        ) from None
    return function(TokenLogprobs.from_content(content, top_k))


def score_response(response: Mapping[str, Any], scorer: str, top_k: int) -> float | None:
    """Score the first choice of a chat/completions response body (None if it has no logprobs)."""
    choices = response.get("choices") or []
    if not choices or not isinstance(choices[0], Mapping):
        return None
    logprobs = choices[0].get("logprobs")
    if not isinstance(logprobs, Mapping):
        return None
    if "content" not in logprobs and "token_logprobs" in logprobs:
        return score_logprobs(legacy_to_content(logprobs), scorer, top_k)
    return score_logprobs(logprobs.get("content"), scorer, top_k)


def legacy_to_content(logprobs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Convert legacy ``/v1/completions`` logprobs (parallel lists) to ``content`` entries."""
    tokens = logprobs.get("tokens") or []
    chosen = logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or []
    content = []
    for i, token in enumerate(tokens):
        top = tops[i] if i < len(tops) and isinstance(tops[i], Mapping) else {}
        content.append(
            {
                "token": token,
                "logprob": chosen[i] if i < len(chosen) else None,
                "top_logprobs": [{"token": t, "logprob": lp} for t, lp in top.items()],
            }
        )
    return content
