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
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from policies.blackbox import content_text

CHEAP = "cheap-v1"
MINILM = "minilm-v1"
FEATURE_SETS = (CHEAP, MINILM)
HASH_DIMS = 256
MINILM_DIMS = 384
MAX_FEATURE_CHARS = 8000  # longer texts are cut: the router reads the head of a request
KINDS = ("text", "tool_call", "structured_output")
_TOKEN = re.compile(r"\w+|[^\w\s]")


def feature_dims(name: str) -> int:
    """Length of the vector of feature set ``name``."""
    if name == CHEAP:
        return HASH_DIMS + 4 + len(KINDS)
    if name == MINILM:
        return MINILM_DIMS
    raise ValueError(f"unknown feature set {name!r}; known: {', '.join(FEATURE_SETS)}")


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


def cheap_features(text: str, n_tools: int, kind: str) -> np.ndarray:
    """The ``cheap-v1`` vector of one request (float64, ``feature_dims(CHEAP)`` long)."""
    vector = np.zeros(feature_dims(CHEAP))
    tokens = _TOKEN.findall(text.lower())
    counts: dict[int, int] = {}
    previous = ""
    for token in tokens:
        for gram in (token, f"{previous} {token}"):
            bucket = zlib.crc32(gram.encode()) % HASH_DIMS
            counts[bucket] = counts.get(bucket, 0) + 1
        previous = token
    if counts:
        buckets = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
        values = np.log1p(np.fromiter(counts.values(), dtype=np.float64, count=len(counts)))
        vector[buckets] = values / math.sqrt(float(values @ values))
    vector[HASH_DIMS] = math.log1p(len(text))
    vector[HASH_DIMS + 1] = math.log1p(len(tokens))
    vector[HASH_DIMS + 2] = 1.0 if n_tools else 0.0
    vector[HASH_DIMS + 3] = math.log1p(n_tools)
    if kind in KINDS:
        vector[HASH_DIMS + 4 + KINDS.index(kind)] = 1.0
    return vector


def request_parts(body: Mapping[str, Any], kind: str) -> tuple[str, int, str]:
    """``(text, number of tools, kind)`` of a chat-completions request body."""
    messages = body.get("messages")
    tools = body.get("tools")
    tool_list = [t for t in tools if isinstance(t, Mapping)] if isinstance(tools, list) else []
    text = request_text(messages if isinstance(messages, list) else [], tool_list)
    return text, len(tool_list), kind
