"""When a streamed cascade tier decides: the commit rule of a tier (docs/streaming.md).

``buffer`` (also an absent ``commit``): the cheap stage's whole answer is read, scored, then relayed
or escalated. ``prefix``: the cheap stage is scored on the first ``tokens`` generated tokens (with
``boundary: line``, on the tokens up to and including the first one that ends a line, if that comes
sooner), then either escalated (the cheap call cancelled and charged for what it generated) or
committed (the prefix relayed, then the rest live). An answer shorter than the prefix is scored
whole, as the buffered rule scores it.

``prefix_entries`` is the one definition of "the prefix" both sides use: calibration scores the
recorded logprobs through it, the gateway the streamed ones, so a threshold means the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import Field, model_validator

from policies.schema_base import StrictModel


class CommitRule(StrictModel):
    """A tier's commit rule: ``{"rule": "buffer"}`` or ``{"rule": "prefix", "tokens": K}``
    (optionally ``"boundary": "line"``)."""

    rule: Literal["buffer", "prefix"]
    tokens: int | None = Field(None, ge=1, le=4096)
    boundary: Literal["line"] | None = None

    @model_validator(mode="after")
    def _prefix_has_tokens(self) -> CommitRule:
        if (self.rule == "prefix") != (self.tokens is not None):
            raise ValueError("a prefix commit rule has tokens (and buffer has none)")
        if self.boundary is not None and self.rule != "prefix":
            raise ValueError("only a prefix commit rule has a boundary")
        return self

    def document(self) -> dict[str, Any]:
        """The rule as written in a policy (absent fields left out)."""
        return self.model_dump(mode="json", exclude_none=True)


def line_end(content: Sequence[Any], tokens: int, start: int = 0) -> int | None:
    """The index of the first entry of ``content`` from ``start`` on, within the first ``tokens``,
    whose token holds a newline: where a ``boundary: line`` prefix ends. The very first entry is not
    counted (docs/contracts.md#policy-file). None: no such entry.

    ``start`` lets a reader of a growing list (the gateway's held stream) look at new entries only.
    """
    for index in range(max(start, 1), min(tokens, len(content))):
        entry = content[index]
        if isinstance(entry, Mapping) and isinstance(token := entry.get("token"), str) and "\n" in token:
            return index
    return None


def prefix_length(content: Sequence[Any], tokens: int, boundary: str | None = None) -> int:
    """How many leading entries of ``content`` (``logprobs.content``) the prefix rule reads.

    At most ``tokens``; with ``boundary="line"``, stops after the first entry whose token holds a
    newline when that comes first (``line_end``). Never more than the entries there are (a short
    answer is read whole).
    """
    end = line_end(content, tokens) if boundary == "line" else None
    return min(tokens, len(content)) if end is None else end + 1


def prefix_entries(content: Sequence[Any] | None, tokens: int, boundary: str | None = None) -> list[Any]:
    """The leading entries of ``content`` that a ``prefix`` rule scores (``prefix_length``)."""
    entries = list(content or [])
    return entries[: prefix_length(entries, tokens, boundary)]
