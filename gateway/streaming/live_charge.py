"""One live stage's call and its charge, however its stream ends (gateway.streaming.live relays it).

Each exit of the relay names its ``Ending`` and ``ending_attempt`` alone turns it into the 200
attempt's charge (docs/contracts.md#charges); ``StreamTally`` counts what the stream delivered;
a ``LiveCall`` settles once, at its first ending.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any

from gateway.wire.facts import CascadeFacts
from money import Price
from money.charges import NOT_BILLED, Attempt, Charge, attempt_charge

# The engine's settlement of one call's attempts: (facts, model, attempts) -> their charge.
Settle = Callable[[CascadeFacts, str, list[Attempt]], Charge]


class StreamTally:
    """What one live stage delivered, for charging it however it ends (``charge``).

    It keeps the last ``usage`` object a chunk carried and counts one completion token per upstream
    chunk that carries output (text, content, a tool-call or refusal delta), or the chunk's number
    of logprob entries when larger: OpenAI-compatible servers stream one token per chunk. Every
    chunk read from the upstream counts, including one received but not yet written to a client
    that has gone.
    """

    __slots__ = ("completion_tokens", "usage")

    def __init__(self) -> None:
        self.completion_tokens = 0
        self.usage: dict[str, Any] | None = None

    def observe(self, event: dict[str, Any]) -> None:
        """Count one upstream chunk (and keep its ``usage``, if it has one)."""
        self.observe_all((event,))

    def observe_all(self, events: Iterable[dict[str, Any]]) -> None:
        """Count upstream chunks in order (``observe`` of each, in one call)."""
        tokens = self.completion_tokens
        for event in events:
            usage = event.get("usage")
            if isinstance(usage, dict):
                self.usage = usage
            choices = event.get("choices")
            if not isinstance(choices, list):
                continue
            for choice in choices:
                if not isinstance(choice, dict):
                    continue
                delta = choice.get("delta")
                part = delta if isinstance(delta, dict) else choice
                carries = (
                    part.get("content")
                    or part.get("text")
                    or part.get("tool_calls")
                    or part.get("refusal")
                    or part.get("reasoning_content")
                )
                logprobs = choice.get("logprobs")
                entries = 0
                if isinstance(logprobs, dict):
                    listed = logprobs.get("content") or logprobs.get("tokens")
                    entries = len(listed) if isinstance(listed, list) else 0
                if carries or entries:
                    tokens += entries if entries > 1 else 1
        self.completion_tokens = tokens

    def attempt(self, sent: bytes) -> Attempt:
        """The accepted attempt as charged (``sent``: the upstream request): its last usage, and
        the output chunks read."""
        return Attempt(sent, usage=self.usage, streamed_tokens=self.completion_tokens)

    def charge(self, price: Price, sent: bytes) -> Charge:
        """The accepted attempt's charge (``money.charges.attempt_charge`` of ``attempt``)."""
        return attempt_charge(price, self.attempt(sent))


class Ending(Enum):
    """How a live stage's stream ended; ``ending_attempt`` says what each ending is charged."""

    UNANSWERED = "unanswered"  # no 200: only the attempts the upstream client reported
    WHOLE = "whole"  # the upstream ignored ``stream``: one JSON answer, read whole
    CUT_JSON = "cut_json"  # that JSON answer cut, timed out or unreadable
    COMPLETE = "complete"  # the stream ran to its end
    REJECTED = "rejected"  # closed by the gateway: a prefix not committed to
    BROKEN = "broken"  # broke off after the 200: cut, timed out, unreadable, left by its client


def ending_attempt(
    ending: Ending, sent: bytes, tally: StreamTally, whole: dict[str, Any] | None
) -> Attempt | None:
    """The 200 attempt of a stream that ended so, as ``money.charges`` charges it (``sent``: the
    upstream request, ``whole``: a JSON answer read); None without a 200 (the upstream client
    reported every attempt). The one place a stream's ending becomes its charge."""
    if ending is Ending.UNANSWERED:
        return None
    if ending is Ending.WHOLE:
        return Attempt(sent, answer=whole)  # charged as the non-streamed answer it is
    if ending is Ending.CUT_JSON:
        return Attempt(sent)  # a JSON answer not read whole: its worst case
    if ending is Ending.COMPLETE or tally.usage is not None:
        return tally.attempt(sent)  # the usage it reported, else the output chunks read
    if ending is Ending.REJECTED:  # closed by the gateway: the chunks read plus the declared overrun
        return Attempt(sent, streamed_tokens=tally.completion_tokens, cancelled=True)
    return Attempt(sent)  # broke off without a usage: what it produced is unknown, its worst case


class LiveCall:
    """One live stage's call while it streams: what it read, and its one settlement (``end``).

    ``interrupted`` is the ending it would have if it stopped now (a failure, its client gone, the
    deadline, a shutdown): it only moves forward, from ``UNANSWERED`` to the 200's kind."""

    __slots__ = (
        "attempts",
        "charge",
        "facts",
        "interrupted",
        "model",
        "seconds",
        "sent",
        "settle",
        "t0",
        "tally",
        "whole",
    )

    def __init__(self, model: str, sent: bytes, facts: CascadeFacts, settle: Settle):
        self.model = model
        self.sent = sent
        self.facts = facts
        self.settle = settle
        self.tally = StreamTally()
        self.attempts: list[Attempt] = []  # the attempts that ended before the 200 (upstream.stream)
        self.whole: dict[str, Any] | None = None  # the answer, when the upstream ignored ``stream``
        self.interrupted = Ending.UNANSWERED
        self.charge: Charge | None = None  # set once ended
        self.seconds = 0.0  # the upstream time, once ended
        self.t0 = time.monotonic()

    def first_chunk(self) -> None:
        """Note the time to the call's first chunk on the console's trace (set: the console is on)."""
        assert self.facts.trace is not None
        self.facts.trace.first_token(self.model, time.monotonic() - self.t0)

    def end(self, ending: Ending) -> None:
        """Stop the upstream clock and charge every attempt of the stage: once, the first ending."""
        if self.charge is not None:
            return
        self.seconds = time.monotonic() - self.t0
        self.facts.upstream_s += self.seconds
        attempt = ending_attempt(ending, self.sent, self.tally, self.whole)
        if attempt is not None:
            self.attempts.append(attempt)
        self.charge = self.settle(self.facts, self.model, self.attempts)

    @property
    def charged(self) -> Charge:
        """What the call was charged (nothing before it ended)."""
        return self.charge if self.charge is not None else NOT_BILLED
