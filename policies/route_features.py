"""Per-request features a pre-generation router reads, computed the same way offline and live.

A router decides before any model call, so it sees only the request: the text of its messages,
its tools and its kind. Two feature sets, each versioned (a policy names the one its coefficients
were fitted on, and the gateway refuses a name it does not know):

* ``cheap-v1``: hashed n-grams of the request text (lower-cased word and single-symbol tokens,
  unigrams and bigrams, ``HASH_DIMS`` buckets by CRC-32, log counts, L2-normalized), then the log
  of its length in characters and in tokens, whether tools are present, the log of their number,
  and the request kind one-hot. Linear time in the text, bounded by ``MAX_FEATURE_CHARS``; a few
  tens of microseconds per request (docs/routing.md), cheap enough to run on the event loop.
* ``minilm-v1``: the 384-d all-MiniLM-L6-v2 embedding of the same text (``traffic.judges.minilm``);
  tens of milliseconds of CPU, so the gateway computes it in a process pool off the event loop.

The request text is the system and user message contents followed by each tool's name and
description: what a model is asked, without the answer format noise of the JSON schemas.
"""

from __future__ import annotations

import math
import re
import sys
import zlib
from array import array
from collections import _count_elements  # type: ignore[attr-defined]
from collections.abc import Mapping, Sequence
from itertools import repeat
from typing import Any

import numpy as np

from policies.blackbox import content_text

CHEAP = "cheap-v1"
MINILM = "minilm-v1"
FEATURE_SETS = (CHEAP, MINILM)
# 256: `_buckets` reads a gram's bucket (crc % HASH_DIMS) as its CRC's low byte, true for 256 only.
HASH_DIMS = 256
MINILM_DIMS = 384
MAX_FEATURE_CHARS = 8000  # longer texts are cut: the router reads the head of a request
KINDS = ("text", "tool_call", "structured_output")
_TOKEN = re.compile(r"\w+|[^\w\s]")
# On ASCII bytes, the tokens _TOKEN finds in the text: \x1c-\x1f are whitespace to \s in a str
# pattern, not in a bytes one, so they are no token here either.
_ASCII_TOKEN = re.compile(rb"\w+|[^\w\s\x1c-\x1f]")


def feature_dims(name: str) -> int:
    """Length of the vector of feature set ``name``."""
    if name == CHEAP:
        return HASH_DIMS + 4 + len(KINDS)
    if name == MINILM:
        return MINILM_DIMS
    raise ValueError(f"unknown feature set {name!r}; known: {', '.join(FEATURE_SETS)}")


_CHEAP_DIMS = feature_dims(CHEAP)
# _buckets: a bucket is a CRC-32's low byte, read from the CRCs packed as 32-bit integers.
_UINT32 = "I" if array("I").itemsize == 4 else "L"
_LOW_BYTE = 0 if sys.byteorder == "little" else 3
# _gram_entries: log1p(1), its square as a float, and the scale that makes every square (>= log1p(1)**2
# >= 1/4, so a multiple of its ulp 2**-54 or coarser) a whole number.
_LOG2 = math.log1p(1)
_LOG2_SQUARED = _LOG2 * _LOG2
_TWO_54 = 2.0**54
_TWO_54_INT = 2**54


def request_text(messages: Sequence[Any], tools: Sequence[Any] | None) -> str:
    """The text a router reads: system/user message contents, then tool names and descriptions."""
    parts: list[str] = []
    for message in messages:
        if isinstance(message, Mapping) and message.get("role") in ("system", "user", "developer"):
            parts.append(content_text(message.get("content")))
    for tool in tools or ():
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping):
            parts.append(f"{function.get('name', '')}: {function.get('description', '')}")
    return "\n".join(part for part in parts if part)[:MAX_FEATURE_CHARS]


class SparseFeatures:
    """A feature vector held as its nonzero entries. What the gateway computes per request (no
    numpy on the request path, docs/routing.md); ``np.asarray`` gives the dense vector
    (``__array__``), for the learning rows and calibration.

    The entries are kept grouped by value, as the router reads them (``LinearRouter.
    sparse_probabilities``: one sum of coefficients per group, one product per group):
    ``groups`` is a list of ``(value, indices)``, each with two indices or more (the n-gram
    entries: one group when every bucket holds one gram, else one per distinct count), and
    ``singles`` the other entries as ``(index, value)``. ``terms`` maps every index to its value
    (built on first use).
    """

    __slots__ = ("_terms", "dims", "groups", "singles")

    def __init__(
        self,
        dims: int,
        groups: list[tuple[float, Sequence[int]]],
        singles: list[tuple[int, float]],
    ) -> None:
        self.dims = dims
        self.groups = groups
        self.singles = singles
        self._terms: dict[int, float] | None = None

    @property
    def terms(self) -> dict[int, float]:
        """The nonzero entries as index -> value: the groups' entries, then the single ones."""
        if self._terms is None:
            terms: dict[int, float] = {}
            for value, indices in self.groups:
                terms.update(dict.fromkeys(indices, value))
            terms.update(self.singles)
            self._terms = terms
        return self._terms

    def dense(self) -> np.ndarray:
        """The whole vector (float64, ``dims`` long)."""
        vector = np.zeros(self.dims)
        for value, indices in self.groups:
            vector[list(indices)] = value
        if self.singles:
            indices, values = zip(*self.singles, strict=True)
            vector[list(indices)] = values
        return vector

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        vector = self.dense()
        return vector if dtype is None else vector.astype(dtype, copy=False)

    def __len__(self) -> int:
        return self.dims


def _grams(text: str) -> list[bytes]:
    """The lower-cased text's tokens (module docstring) as UTF-8 bytes. An ASCII text is tokenized
    from its bytes (``_ASCII_TOKEN``): the same tokens, without encoding each one."""
    lowered = text.lower()
    if lowered.isascii():
        return _ASCII_TOKEN.findall(lowered.encode())
    return [token.encode() for token in _TOKEN.findall(lowered)]


def _buckets(tokens: list[bytes]) -> bytes:
    """The hash bucket of each unigram, then of each bigram, of ``tokens`` (module docstring), one
    byte each: a CRC-32's bucket (``crc % HASH_DIMS``, ``HASH_DIMS`` 256) is its low byte, so the
    CRCs are packed as 32-bit integers and every fourth byte taken, with no Python call per gram.

    A bigram is "previous token", a space, "token" (the first after an empty one); its CRC-32 is
    continued from its previous token's (``crc32(b, crc32(a)) == crc32(a + b)``), so no bigram is
    built. ``map`` keeps the per-gram work in C: the request path's cost.
    """
    crc32 = zlib.crc32
    crcs = list(map(crc32, tokens))
    crcs += map(crc32, tokens, map(crc32, repeat(b" "), [0, *crcs]))
    return array(_UINT32, crcs).tobytes()[_LOW_BYTE::4]


def _gram_entries(buckets: bytes) -> tuple[list[tuple[float, Sequence[int]]], list[tuple[int, float]]]:
    """The n-gram entries of the vector as ``SparseFeatures`` holds them: ``(groups, singles)``.
    Per bucket of ``buckets``, ``log1p(count)`` divided by the L2 norm of all of them; the buckets
    of one count share one value, a group (a count only one bucket has: an entry of ``singles``).

    An entry depends only on its bucket's count, so each distinct count is computed once, and
    exactly as per entry: the norm is the square root of the correctly rounded sum of the squared
    entries, which ``math.fsum`` of the squares gives and which is computed here exactly in
    integers (each square, at least ``log(2)**2``, is a whole multiple of ``2**-54``; an int's true
    division is correctly rounded). A short request's grams usually each have their own bucket:
    all counts 1, one value, ``n * log(2)**2`` rounded is that sum, and ``buckets`` (two grams or
    more: a unigram and a bigram per token) is the one group's indices.
    """
    if not buckets:
        return [], []
    if len(set(buckets)) == len(buckets):  # no bucket holds two grams
        return [(_LOG2 / math.sqrt(len(buckets) * _LOG2_SQUARED), buckets)], []
    counts: dict[int, int] = {}
    _count_elements(counts, buckets)
    by_count: dict[int, list[int]] = {}
    for bucket, count in counts.items():
        by_count.setdefault(count, []).append(bucket)
    values: dict[int, float] = {}
    squares = 0  # the sum of the squared entries, in units of 2**-54
    for count, sharing in by_count.items():
        value = values[count] = math.log1p(count)
        squares += len(sharing) * int(value * value * _TWO_54)
    norm = math.sqrt(squares / _TWO_54_INT)
    groups: list[tuple[float, Sequence[int]]] = []
    singles: list[tuple[int, float]] = []
    for count, sharing in by_count.items():
        if len(sharing) > 1:
            groups.append((values[count] / norm, sharing))
        else:
            singles.append((sharing[0], values[count] / norm))
    return groups, singles


def cheap_terms(text: str, n_tools: int, kind: str) -> SparseFeatures:
    """The ``cheap-v1`` vector of one request as its nonzero entries (module docstring): the one
    definition of the feature set; ``cheap_features`` is its dense form."""
    tokens = _grams(text)
    groups, singles = _gram_entries(_buckets(tokens))
    length = math.log1p(len(text))
    if length:
        singles.append((HASH_DIMS, length))
    if tokens:
        singles.append((HASH_DIMS + 1, math.log1p(len(tokens))))
    if n_tools:
        singles += ((HASH_DIMS + 2, 1.0), (HASH_DIMS + 3, math.log1p(n_tools)))
    if kind in KINDS:
        singles.append((HASH_DIMS + 4 + KINDS.index(kind), 1.0))
    return SparseFeatures(_CHEAP_DIMS, groups, singles)


def cheap_features(text: str, n_tools: int, kind: str) -> np.ndarray:
    """The ``cheap-v1`` vector of one request (float64, ``feature_dims(CHEAP)`` long)."""
    return cheap_terms(text, n_tools, kind).dense()


def request_parts(body: Mapping[str, Any], kind: str) -> tuple[str, int, str]:
    """``(text, number of tools, kind)`` of a chat-completions request body."""
    messages = body.get("messages")
    tools = body.get("tools")
    tool_list = [t for t in tools if isinstance(t, Mapping)] if isinstance(tools, list) else []
    text = request_text(messages if isinstance(messages, list) else [], tool_list)
    return text, len(tool_list), kind
