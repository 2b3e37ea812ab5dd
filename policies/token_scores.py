"""The math of the logprob scorers: an answer's ``logprobs.content`` as arrays, and each score over them.

The scorers themselves (name, range, needs) are the definitions of ``policies.scorers``, which
applies these functions to recorded logprobs (calibration) and live ones (the gateway) alike.
Higher score = more confident. A response with no usable position has no score (``None``).

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

TokenEntry = Mapping[str, Any]
TokenScore = Callable[["TokenLogprobs"], float | None]

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
        entries = usable_entries(content or [])
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


def usable_entries(content: Sequence[TokenEntry]) -> list[TokenEntry]:
    """The entries that are tokens of the answer (end-of-text entries dropped; module docstring)."""
    # ``type(e) is dict`` first: the ABC check costs about 1 k instructions an entry.
    entries = [e for e in content if type(e) is dict or isinstance(e, Mapping)]
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


def mean_token_negentropy(tokens: TokenLogprobs) -> float | None:
    """Mean over informative positions of TN_j = 1 - H_j / ln n_j (None: no informative position)."""
    tn = _token_negentropy(tokens)
    return float(tn.mean()) if tn.size else None


def min_token_negentropy(tokens: TokenLogprobs) -> float | None:
    """Least TN_j over informative positions (None: no informative position)."""
    tn = _token_negentropy(tokens)
    return float(tn.min()) if tn.size else None


# The low quantile of per-position negentropy that ``q10_token_negentropy`` reports: a few uncertain
# positions (a wrong step) drag it down where the mean hides them, without the minimum's dependence
# on a single position (Gupta et al., ICLR 2024, on quantiles of per-token uncertainty).
NEGENTROPY_QUANTILE = 0.10


def quantile_token_negentropy(tokens: TokenLogprobs) -> float | None:
    """The ``NEGENTROPY_QUANTILE`` quantile of TN_j over informative positions, linearly
    interpolated (None: no informative position)."""
    tn = _token_negentropy(tokens)
    return float(np.quantile(tn, NEGENTROPY_QUANTILE)) if tn.size else None


def probability_margin(tokens: TokenLogprobs) -> float | None:
    """Mean over informative positions of p_1 - p_2 (raw probabilities, not renormalized)."""
    informative = _informative(tokens)
    if not informative.any():
        return None
    top2 = np.exp(tokens.alternatives[informative, :2])
    return float((top2[:, 0] - top2[:, 1]).mean())


def _known_chosen(tokens: TokenLogprobs) -> np.ndarray:
    return tokens.chosen[~np.isnan(tokens.chosen)]


def min_probability(tokens: TokenLogprobs) -> float | None:
    """Probability of the least probable chosen token (None: no known chosen logprob)."""
    chosen = _known_chosen(tokens)
    return float(np.exp(chosen.min())) if chosen.size else None


def mean_logprob(tokens: TokenLogprobs) -> float | None:
    """Mean chosen-token logprob (None: no known chosen logprob)."""
    chosen = _known_chosen(tokens)
    return float(chosen.mean()) if chosen.size else None


def sequence_probability(tokens: TokenLogprobs) -> float | None:
    """exp(mean chosen-token logprob): the geometric mean of the chosen tokens' probabilities."""
    mean = mean_logprob(tokens)
    return None if mean is None else float(np.exp(mean))


# Up to this many alternatives in an answer, plain Python beats numpy's per-call overhead (a live
# 8-token answer with top-5..15 alternatives scores in a few microseconds instead of tens).
_PLAIN_MAX_VALUES = 256

# ln n for a position of n alternatives (n <= _PLAIN_MAX_VALUES in the plain path): the same double
# as math.log(n), without converting an int per position. NaN for n < 2: such a position's TN is
# NaN, which sends it the careful way (where it is not informative) without a test per position.
_LOG_COUNTS = (math.nan, math.nan, *(math.log(n) for n in range(2, _PLAIN_MAX_VALUES + 1)))

# The bounds on a position's sum of exp(logprob) within which ``_negentropies``' unshifted sums agree
# with the max-shifted ones of the numpy path to ~1e-13: their rounding grows with |ln norm| (about
# n * 2.2e-16 * |ln norm| / ln n). Outside them (top logprobs below about -46 or above 46, a -inf
# alternative, NaN) the position is scored the careful way (``_careful_negentropy``).
_NORM_MIN, _NORM_MAX = 1e-20, 1e20


class _Irregular(Exception):
    """Input the plain path leaves to the numpy one (``plain_negentropies`` then returns None)."""


def plain_negentropies(content: Sequence[Any], top_k: int) -> list[float] | None:
    """TN_j of every informative position in plain Python, or None to use the numpy path.

    The same formulas as ``_token_negentropy`` (docs/contracts.md#scorers), for the common case
    only: small answers whose entries are dicts (mappings) and whose alternatives are lists of dicts with a
    number as logprob. Anything else (missing values, NaN, other shapes, large answers) returns
    None. Results agree with the numpy path to rounding (sums taken in another order and, for
    ordinary logprobs, without subtracting the position's maximum; < 1e-12).
    """
    if type(content) is not list:
        return None
    end = len(content)
    try:
        # Without the trailing end-of-text entries (``usable_entries``; the entries without
        # alternatives it also drops give no position here).
        while end:
            last = content[end - 1]
            if last.get("token", None) != "" or last.get("bytes"):
                break
            end -= 1
        entries = content if end == len(content) else content[:end]
        return _negentropies(entries, top_k if top_k > 1 else 1)
    except (_Irregular, TypeError, KeyError, IndexError, AttributeError, ValueError, OverflowError):
        return None


def _too_many_values(entries: list[Any]) -> bool:
    """More alternatives than the plain path takes (a long answer goes to numpy before any math)."""
    return sum(len(entry.get("top_logprobs") or ()) for entry in entries) > _PLAIN_MAX_VALUES


def _negentropies(entries: list[Any], k: int) -> list[float] | None:
    """TN_j of the entries' informative positions (None: more than ``_PLAIN_MAX_VALUES`` values).

    The usual position, at most K alternatives with ordinary logprobs, in one pass over its
    alternatives: norm = sum exp(v), weighted = sum exp(v) * v, H = ln norm - weighted / norm (the
    same entropy as with p = exp(v) / norm, which the max-shifted form only keeps from underflowing).
    Raises for input the numpy path has to see (a value that is no number, a missing logprob).
    """
    # At most K values a position keeps the answer within the limit; counted once otherwise.
    counted = len(entries) * k <= _PLAIN_MAX_VALUES
    if not counted and _too_many_values(entries):
        return None
    out: list[float] = []
    append = out.append
    exp = math.exp
    log = math.log
    logs = _LOG_COUNTS
    norm_min = _NORM_MIN
    norm_max = _NORM_MAX
    for entry in entries:
        try:
            alternatives = entry["top_logprobs"]
            n = len(alternatives)
        except (KeyError, TypeError):  # no alternatives (or no mapping): no position, as in numpy
            continue
        if n <= k:
            norm = weighted = 0.0
            for alternative in alternatives:
                v = alternative["logprob"]
                w = exp(v)
                norm += w
                weighted += w * v
            # Both tests are False for NaN: a NaN norm, and a NaN TN (one alternative: ln 1 is NaN
            # in ``logs``; a -inf alternative: 0 * -inf) go the careful way, and so does a TN just
            # outside [0, 1] by rounding (clipped there).
            if norm_min < norm < norm_max:
                tn = 1.0 - (log(norm) - weighted / norm) / logs[n]
                if 0.0 <= tn <= 1.0:
                    append(tn)
                    continue
        elif not counted:
            if _too_many_values(entries):
                return None
            counted = True
        careful = _careful_negentropy(alternatives, k)
        if careful is not None:
            append(careful)
    return out


def _careful_negentropy(alternatives: list[Any], k: int) -> float | None:
    """TN of one position over its top K, shifted by its maximum (-inf alternatives, rows longer
    than K, extreme logprobs, the last-ulp clipping); None: not informative. Raises ``_Irregular``
    for a value the numpy path has to see (not a float, or NaN)."""
    row = [alternative["logprob"] for alternative in alternatives]
    for value in row:
        if type(value) is not float or value != value:  # None, ints, NaN: the numpy path
            raise _Irregular
    # The top K; a row of at most K is all of it, in any order (the sums do not depend on it).
    top = row if len(row) <= k else sorted(row, reverse=True)[:k]
    if len(top) < 2:
        return None
    first = max(top)
    if not math.isfinite(first):
        return None
    # H = -sum p log p with p = w / norm, log p = (v - first) - log norm; p = 0 terms add nothing.
    norm = weighted = 0.0
    for v in top:
        w = math.exp(v - first)
        norm += w
        if w > 0:
            weighted += w * (v - first)
    entropy = math.log(norm) - weighted / norm
    return min(max(1.0 - entropy / math.log(len(top)), 0.0), 1.0)


def plain_mean(values: list[float]) -> float | None:
    """Mean of ``plain_negentropies`` (None when empty)."""
    return sum(values) / len(values) if values else None


def plain_min(values: list[float]) -> float | None:
    """Least of ``plain_negentropies`` (None when empty)."""
    return min(values) if values else None
