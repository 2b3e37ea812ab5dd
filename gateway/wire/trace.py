"""A request's stages as the console records them: every call, every score, every escalation.

``CascadeFacts.trace`` is None unless the console is enabled (gateway.config.console); the engine then
tells it of each upstream call as it is charged (``call``), each scored stage's score against its
threshold (``scored``) and each escalation's reason (``escalated``); a streamed call's first chunk
(``first_token``, from gateway.streaming.sse's read of the stream) is noted on the call it belongs
to when that call is charged. gateway.records turns it into
the request's decision record. With the console off the engine pays one ``is not None`` per hook.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from money.charges import Charge


@dataclass(slots=True, frozen=True)
class CallNote:
    """One upstream call as charged: its model, attempts (``billed``: those that may have been
    billed), its USD and tokens, the part of the USD that is a bound (no usage was read), when it
    was settled (``time.perf_counter()``) and, for a streamed call, the seconds from its start to
    its first chunk (None: not streamed, or no chunk came)."""

    model: str
    attempts: int
    billed: int
    usd: float
    bound_usd: float
    prompt_tokens: int
    completion_tokens: int
    settled_at: float
    first_token_s: float | None = None


@dataclass(slots=True, frozen=True)
class ScoreNote:
    """A scored stage's score (None: no usable logprobs) against its threshold."""

    model: str
    score: float | None
    threshold: float


class DecisionTrace:
    """What the engine tells the console of one request, in order (see the module docstring)."""

    __slots__ = ("calls", "escalations", "first_tokens", "scores", "started")

    def __init__(self, started: float):
        """``started``: the request's ``time.perf_counter()`` start."""
        self.started = started
        self.calls: list[CallNote] = []
        self.scores: list[ScoreNote] = []
        self.escalations: list[tuple[str, str]] = []
        # A streamed call's first-chunk time until the call is charged (calls of different models
        # may stream at once: an early-started final stage).
        self.first_tokens: dict[str, float] = {}

    def call(self, model: str, attempts: int, charges: Sequence[Charge]) -> None:
        """One call to ``model`` settled: ``attempts`` made, ``charges`` of the billable ones."""
        usd = sum(c.usd for c in charges)
        self.calls.append(
            CallNote(
                model,
                attempts,
                len(charges),
                usd,
                sum(c.usd for c in charges if c.bound),
                sum(c.prompt_tokens for c in charges),
                sum(c.completion_tokens for c in charges),
                time.perf_counter(),
                self.first_tokens.pop(model, None),
            )
        )

    def first_token(self, model: str, seconds: float) -> None:
        """The streamed call to ``model`` read its first chunk ``seconds`` after the call began."""
        self.first_tokens[model] = seconds

    def scored(self, model: str, score: float | None, threshold: float) -> None:
        """A scored stage of ``model`` was scored ``score`` against ``threshold``."""
        self.scores.append(ScoreNote(model, score, threshold))

    def escalated(self, model: str, reason: str) -> None:
        """The stage of ``model`` escalated for ``reason`` (an ``EscalationReason``)."""
        self.escalations.append((model, str(reason)))
