"""Confidence scorers over OpenAI ``logprobs.content`` (docs/contracts.md#scorers).

Calibration applies these to recorded logprobs and the gateway to live ones: the same function on
both sides, so a threshold chosen offline means the same thing online. Higher score = more
confident. A response with no usable position has no score (``None``).

Input quirks handled (see tests/fixtures/upstream and docs/scorers.md):

* llama.cpp's native server appends an end-of-text entry (empty token, empty ``bytes``) to
  non-streamed answers that stopped on EOS, *with* alternatives; its OpenAI-compatible mode and
  its streams omit it. Trailing end-of-text entries are skipped, and so is any empty-token entry
  without alternatives, so the same answer scores the same whichever way it was fetched. An empty
  token that carries bytes (a partial UTF-8 character) is a real token and is kept.
* A position is scored over its K most probable alternatives; one with fewer than K is scored
  over those it has (entropy normalized by ln of its own count). A position with fewer than two
  alternatives says nothing about uncertainty and is skipped by the alternative-based scorers.
* Missing or null ``logprobs``/``top_logprobs``/``logprob`` values give ``None`` (or skip that
  value) rather than an error. A logprob of ``-inf`` is a probability of 0: such an alternative
  still counts towards the position's count, and such a chosen token drives ``min_probability``
  and ``sequence_probability`` to 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from policies.call_tokens import select_tokens
from policies.errors import UnknownScorerError

TokenEntry = Mapping[str, Any]

# Pads ragged rows of alternatives: probability exp(-inf) = 0 contributes nothing.
_PAD = -np.inf


class TokenLogprobs:
    """Usable positions of one answer as arrays.

    Attributes:
        chosen: (P,) natural-log probability of each generated token (NaN where missing).
        alternatives: (P, K) top-K logprobs per position, sorted descending, padded with -inf.
        counts: (P,) number of real alternatives per position (<= K).
    """

    __slots__ = ("alternatives", "chosen", "counts")

    def __init__(self, chosen: np.ndarray, alternatives: np.ndarray, counts: np.ndarray):
        self.chosen = chosen
        self.alternatives = alternatives
        self.counts = counts

    @classmethod
    def from_content(
        cls, content: Sequence[TokenEntry] | None, top_k: int, with_alternatives: bool = True
    ) -> TokenLogprobs:
        """Extract usable positions from ``logprobs.content``, keeping at most ``top_k`` alternatives.

        ``with_alternatives=False`` skips parsing the alternatives (the chosen-token scorers do not
        need them); ``alternatives`` is then (P, 0) and ``counts`` all zero.
        """
        entries = _usable_entries(content or [])
        chosen = _floats([entry.get("logprob") for entry in entries])
        if not with_alternatives:
            return cls(chosen, np.empty((len(entries), 0)), np.zeros(len(entries), dtype=np.int64))
        alternatives, counts = _alternatives_matrix(entries, max(top_k, 1))
        return cls(chosen, alternatives, counts)


def _floats(values: list[Any]) -> np.ndarray:
    """Values as float64, None and non-numbers as NaN (fast path: one numpy conversion)."""
    try:
        return np.array(values, dtype=np.float64).reshape(len(values))
    except (TypeError, ValueError):
        return np.array([_as_float(value) for value in values], dtype=np.float64)


def _as_float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _alternatives_matrix(entries: list[TokenEntry], top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """(P, top_k) alternatives sorted descending and padded with -inf, and (P,) real counts."""
    rows = [entry.get("top_logprobs") or () for entry in entries]
    try:  # fast path: well-formed lists of dicts (ABC isinstance checks cost more than the math)
        values = [alt["logprob"] for row in rows for alt in row]
    except (TypeError, KeyError, IndexError):
        rows = [row if isinstance(row, Sequence) and not isinstance(row, str) else () for row in rows]
        values = [alt.get("logprob") if isinstance(alt, Mapping) else None for row in rows for alt in row]
    lengths = np.fromiter((len(row) for row in rows), dtype=np.int64, count=len(rows))
    flat = _floats(values)
    width = int(lengths.max()) if lengths.size else 0
    matrix = np.full((len(rows), max(width, top_k)), _PAD)
    missing = np.isnan(flat)  # a missing logprob is no alternative at all
    if flat.size and int(lengths.min()) == width and not missing.any():
        matrix[:, :width] = flat.reshape(len(rows), width)  # the usual case: K per position
        counts = lengths
    elif flat.size:
        row_index = np.repeat(np.arange(len(rows)), lengths)
        column_index = np.arange(flat.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        present = ~missing
        matrix[row_index[present], column_index[present]] = flat[present]
        counts = np.bincount(row_index[present], minlength=len(rows))
    else:
        counts = np.zeros(len(rows), dtype=np.int64)
    # Servers send alternatives sorted, but nothing guarantees it: sort, then keep the top K.
    matrix = -np.sort(-matrix, axis=1)[:, :top_k]
    return matrix, np.minimum(counts, top_k)


def _is_end_of_text(entry: TokenEntry) -> bool:
    return entry.get("token", None) == "" and not entry.get("bytes")


def _usable_entries(content: Sequence[TokenEntry]) -> list[TokenEntry]:
    entries = [e for e in content if isinstance(e, Mapping)]
    # Drop the end-of-text entry(ies) at the tail, then any empty, alternative-less entry.
    while entries and _is_end_of_text(entries[-1]):
        entries.pop()
    return [e for e in entries if e.get("token", None) != "" or e.get("top_logprobs")]


def _informative(tokens: TokenLogprobs) -> np.ndarray:
    """(P,) positions with at least two alternatives and some probability mass among them."""
    return (tokens.counts >= 2) & np.isfinite(tokens.alternatives[:, 0])


def _token_negentropy(tokens: TokenLogprobs) -> np.ndarray:
    """(P',) TN_j = 1 - H_j / ln(n_j) over informative positions (n_j = alternatives at j)."""
    informative = _informative(tokens)
    alts = tokens.alternatives[informative]
    if alts.shape[0] == 0:
        return np.empty(0)
    # Renormalize the top-K probabilities (softmax of the logprobs, stable under -inf padding).
    weights = np.exp(alts - alts[:, :1])
    probs = weights / weights.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(probs > 0, probs * np.log(probs), 0.0)
    entropy = -plogp.sum(axis=1)
    # 0 <= H <= ln n exactly; clip the last-ulp rounding of near-uniform and near-certain rows.
    return np.clip(1.0 - entropy / np.log(tokens.counts[informative]), 0.0, 1.0)


def _mean_token_negentropy(tokens: TokenLogprobs) -> float | None:
    tn = _token_negentropy(tokens)
    return float(tn.mean()) if tn.size else None


def _min_token_negentropy(tokens: TokenLogprobs) -> float | None:
    tn = _token_negentropy(tokens)
    return float(tn.min()) if tn.size else None


# The low quantile of per-position negentropy that ``q10_token_negentropy`` reports: a few uncertain
# positions (a wrong step) drag it down where the mean hides them, without the minimum's dependence
# on a single position (Gupta et al., ICLR 2024, on quantiles of per-token uncertainty).
NEGENTROPY_QUANTILE = 0.10


def _quantile_token_negentropy(tokens: TokenLogprobs) -> float | None:
    tn = _token_negentropy(tokens)
    return float(np.quantile(tn, NEGENTROPY_QUANTILE)) if tn.size else None


def _probability_margin(tokens: TokenLogprobs) -> float | None:
    """Mean over informative positions of p_1 - p_2 (raw probabilities, not renormalized)."""
    informative = _informative(tokens)
    if not informative.any():
        return None
    top2 = np.exp(tokens.alternatives[informative, :2])
    return float((top2[:, 0] - top2[:, 1]).mean())


def _known_chosen(tokens: TokenLogprobs) -> np.ndarray:
    return tokens.chosen[~np.isnan(tokens.chosen)]


def _min_probability(tokens: TokenLogprobs) -> float | None:
    chosen = _known_chosen(tokens)
    return float(np.exp(chosen.min())) if chosen.size else None


def _mean_logprob(tokens: TokenLogprobs) -> float | None:
    chosen = _known_chosen(tokens)
    return float(chosen.mean()) if chosen.size else None


def _sequence_probability(tokens: TokenLogprobs) -> float | None:
    mean = _mean_logprob(tokens)
    return None if mean is None else float(np.exp(mean))


SCORERS: dict[str, Callable[[TokenLogprobs], float | None]] = {
    "mean_token_negentropy": _mean_token_negentropy,
    "min_token_negentropy": _min_token_negentropy,
    "q10_token_negentropy": _quantile_token_negentropy,
    "probability_margin": _probability_margin,
    "min_probability": _min_probability,
    "sequence_probability": _sequence_probability,
    "mean_logprob": _mean_logprob,
}

# The values each scorer can give (docs/scorers.md): a threshold outside them is meaningless (above
# the top it escalates every answer, below the bottom none), so policies.schema refuses it.
SCORE_RANGES: dict[str, tuple[float, float]] = {
    "mean_token_negentropy": (0.0, 1.0),
    "min_token_negentropy": (0.0, 1.0),
    "q10_token_negentropy": (0.0, 1.0),
    "probability_margin": (0.0, 1.0),
    "min_probability": (0.0, 1.0),
    "sequence_probability": (0.0, 1.0),
    "mean_logprob": (-math.inf, 0.0),
    # The black-box scorers of policies.blackbox: P(yes), a share of samples, a stated percentage.
    "verifier": (0.0, 1.0),
    "consistency": (0.0, 1.0),
    "self_report": (0.0, 1.0),
}

# The scorers made of the K alternatives per position (the others read the chosen tokens only): a
# model giving fewer than ``top_k`` alternatives changes their score (policies.capabilities).
ALTERNATIVE_SCORERS = frozenset(
    {"mean_token_negentropy", "min_token_negentropy", "q10_token_negentropy", "probability_margin"}
)
_USES_ALTERNATIVES = ALTERNATIVE_SCORERS

# Up to this many alternatives in an answer, plain Python beats numpy's per-call overhead (a live
# 8-token answer with top-5..15 alternatives scores in a few microseconds instead of tens).
_PLAIN_MAX_VALUES = 256


def _plain_negentropies(content: Sequence[Any], top_k: int) -> list[float] | None:
    """TN_j of every informative position in plain Python, or None to use the numpy path.

    The same formulas as ``_token_negentropy`` (docs/contracts.md#scorers), for the common case
    only: small answers whose entries are dicts and whose alternatives are lists of dicts with a
    float logprob. Anything else (missing values, other shapes, large answers) returns None.
    Results agree with the numpy path to rounding (sums taken in another order; < 1e-12).
    """
    if type(content) is not list or any(type(entry) is not dict for entry in content):
        return None
    rows: list[list[float]] = []
    total = 0
    for entry in _usable_entries(content):
        alternatives = entry.get("top_logprobs")
        if not alternatives:  # no alternatives (None, []): never an informative position
            continue
        if type(alternatives) is not list:
            return None
        total += len(alternatives)
        if total > _PLAIN_MAX_VALUES:
            return None
        try:
            row = [alternative["logprob"] for alternative in alternatives]
        except (TypeError, KeyError, IndexError):
            return None
        for value in row:
            if type(value) is not float or value != value:  # None, ints, NaN: the numpy path
                return None
        rows.append(row)
    k = max(top_k, 1)
    out = []
    log, exp, isfinite = math.log, math.exp, math.isfinite
    for row in rows:
        top = sorted(row, reverse=True)[:k]
        if len(top) < 2 or not isfinite(top[0]):
            continue
        first = top[0]
        # H = -sum p log p with p = w / norm, log p = (v - first) - log norm; p = 0 terms add nothing.
        weights = [exp(v - first) for v in top]
        norm = sum(weights)
        weighted = 0.0
        for w, v in zip(weights, top, strict=True):
            if w > 0:
                weighted += w * (v - first)
        entropy = log(norm) - weighted / norm
        out.append(min(max(1.0 - entropy / log(len(top)), 0.0), 1.0))
    return out


def _plain_mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _plain_min(values: list[float]) -> float | None:
    return min(values) if values else None


_PLAIN_REDUCERS: dict[str, Callable[[list[float]], float | None]] = {
    "mean_token_negentropy": _plain_mean,
    "min_token_negentropy": _plain_min,
}


def score_logprobs(
    content: Sequence[TokenEntry] | None, scorer: str, top_k: int, tokens: str = "all"
) -> float | None:
    """Confidence of one answer from its ``choices[i].logprobs.content`` list.

    Args:
        content: the OpenAI token-logprob entries (``token``, ``logprob``, ``top_logprobs``).
        scorer: one of ``SCORERS`` (docs/contracts.md#scorers); ``external`` cannot be computed here.
        top_k: K, the number of alternatives the scorer uses per position.
        tokens: which positions are scored (``ScorerSpec.tokens``): ``all``, or ``call_values``,
            the tokens of a call's function name and argument values when the answer is wholly
            calls, else all (``policies.call_tokens``).

    Returns:
        The score (higher = more confident), or None when no position is usable.
    """
    try:
        function = SCORERS[scorer]
    except KeyError:
        raise UnknownScorerError(
            f"scorer {scorer!r} cannot be computed from logprobs; choose one of {', '.join(SCORERS)}"
        ) from None
    if tokens != "all":
        content = select_tokens(content, tokens)
    reducer = _PLAIN_REDUCERS.get(scorer)
    if reducer is not None and content:
        values = _plain_negentropies(content, top_k)
        if values is not None:
            return reducer(values)
    parsed = TokenLogprobs.from_content(content, top_k, with_alternatives=scorer in _USES_ALTERNATIVES)
    return function(parsed)


def score_response(response: Mapping[str, Any], scorer: str, top_k: int, tokens: str = "all") -> float | None:
    """Score the first choice of a chat/completions response body (None if it has no logprobs);
    ``tokens`` as in ``score_logprobs``."""
    choices = response.get("choices") or []
    if not choices or not isinstance(choices[0], Mapping):
        return None
    logprobs = choices[0].get("logprobs")
    if not isinstance(logprobs, Mapping):
        return None
    if "content" not in logprobs and "token_logprobs" in logprobs:
        return score_logprobs(legacy_to_content(logprobs), scorer, top_k, tokens)
    return score_logprobs(logprobs.get("content"), scorer, top_k, tokens)


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
