"""The live final stage of a streamed request: relay the upstream's SSE, charge what was streamed.

The cascade engine (gateway.engine.cascade) drives a streamed request as an async iterator of
client-ready events (``StreamStart``, ``StreamChunk``, ``StreamFailed``); the endpoint only writes
them. ``LiveRelay`` is the part of that iterator that relays one upstream stream:

* the client's response starts only at the first upstream chunk that carries a choice, so an
  upstream that answers 200 and then sends nothing usable (``choices: []``, non-object choices,
  broken JSON, an error event) fails *before* the client saw a byte and can still fall back to
  the cheap answer (or a 502/504);
* a failure after the start ends the stream with an SSE ``error`` event (never a silent cut);
* every attempt of the stage is charged, however the stream ends, by the one charging rule
  (``money.charges.attempt_charge``, through the engine's ``settle``): the accepted one (HTTP
  200) by the usage its stream reported, else, when it ran to its end, by what it delivered
  (``StreamTally``), or as the whole answer it sent; one that broke off without a usage (cut,
  timed out, unreadable, left by its client), timed out or was cut before its answer began, or
  whose JSON answer could not be read, at its worst case: the provider may have produced more
  than the gateway read. This covers a client that disconnects, an upstream cut, the request
  deadline and a shutdown alike: the charge is made in a ``finally`` that runs on cancellation.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

from gateway.stages.answer_review import StreamedAnswer
from gateway.stages.bodies import trim_alternatives
from gateway.stages.outcomes import StreamChunk, StreamEvent, StreamFailed, StreamStart
from gateway.streaming.prefix_commit import PrefixGate
from gateway.streaming.sse import DONE, SSE_HEADERS, client_chunk, sse, upstream_events
from gateway.upstream.client import UpstreamClient, UpstreamFailure, read_completion
from gateway.wire.answer_reading import reading_answer
from gateway.wire.errors import UnreadableAnswerError
from gateway.wire.facts import CascadeFacts
from gateway.wire.requests import ParsedRequest
from money import Price
from money.charges import Attempt, Charge, attempt_charge

# The engine's settlement of one call's attempts: (facts, model, attempts) -> their charge.
Settle = Callable[[CascadeFacts, str, list[Attempt]], Charge]
# The engine's decision on a held prefix (gateway.streaming.prefix_commit): True commits to the stage.
Decide = Callable[[PrefixGate], bool]


@dataclass(slots=True, frozen=True)
class PrefixRejected:
    """The held prefix was not committed to: the stage's call is cancelled (and charged)."""


@dataclass(slots=True, frozen=True)
class ShortAnswer:
    """The stream ended before the prefix's decision point: its whole answer, to decide as a buffered one."""

    body: dict[str, Any]


@dataclass(slots=True, frozen=True)
class WholeAnswer:
    """The upstream ignored ``stream`` and sent one JSON completion (the engine replays it)."""

    body: dict[str, Any]


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
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        choices = event.get("choices")
        if isinstance(choices, list):
            self.completion_tokens += sum(_chunk_tokens(c) for c in choices if isinstance(c, dict))

    def attempt(self, sent: bytes) -> Attempt:
        """The accepted attempt as charged (``sent``: the upstream request): its last usage, and
        the output chunks read."""
        return Attempt(sent, usage=self.usage, streamed_tokens=self.completion_tokens)

    def charge(self, price: Price, sent: bytes) -> Charge:
        """The accepted attempt's charge (``money.charges.attempt_charge`` of ``attempt``)."""
        return attempt_charge(price, self.attempt(sent))


def _chunk_tokens(choice: dict[str, Any]) -> int:
    delta = choice.get("delta")
    part = delta if isinstance(delta, dict) else choice
    carries = any(part.get(k) for k in ("content", "text", "tool_calls", "refusal", "reasoning_content"))
    logprobs = choice.get("logprobs")
    entries = 0
    if isinstance(logprobs, dict):
        listed = logprobs.get("content") or logprobs.get("tokens")
        entries = len(listed) if isinstance(listed, list) else 0
    return max(1, entries) if carries or entries else 0


class LiveRelay:
    """Relays one upstream stream as client events and charges it (see the module docstring)."""

    def __init__(
        self,
        client: UpstreamClient,
        request: ParsedRequest,
        facts: CascadeFacts,
        settle: Settle,
        started: float,
        watch: StreamedAnswer | None = None,
        gate: tuple[PrefixGate, Decide] | None = None,
    ):
        """``settle(facts, model, attempts)`` charges the stage's attempts; ``started`` is the
        request's perf_counter; ``watch`` assembles the streamed answer for the structural checks
        (gateway.stages.answer_review), checked before the last chunk carries the facts. ``gate``: a cheap
        stage under the ``prefix`` rule (gateway.streaming.prefix_commit): its chunks are held until the
        gate's
        decision point, then ``decide(gate)`` commits (they are relayed, the stream goes on live)
        or not (``PrefixRejected``: the call is cancelled); a stream that ends first is a
        ``ShortAnswer``."""
        self._client = client
        self._request = request
        self._facts = facts
        self._settle = settle
        self._started = started
        self._watch = watch
        self._gate = gate

    def _overhead_ms(self, running_s: float = 0.0) -> float:
        """Gateway time so far: all but the finished upstream calls and ``running_s`` of this one."""
        return (time.perf_counter() - self._started - self._facts.upstream_s - running_s) * 1000

    async def events(
        self, body: bytes, deadline: float
    ) -> AsyncGenerator[StreamEvent | WholeAnswer | PrefixRejected | ShortAnswer, None]:
        """Client events of the stream ``body`` asks for; UpstreamFailure only before the start."""
        model, request, facts = self._client.name, self._request, self._facts
        facts.models_called.append(model)
        tally = StreamTally()
        attempts: list[Attempt] = []  # the attempts that ended before the 200 (upstream.stream)
        whole: dict[str, Any] | None = None  # the answer, when the upstream ignored ``stream``
        accepted = json_answer = started = done = complete = rejected = False
        t0 = time.monotonic()

        def finish() -> None:
            """Stop the upstream clock and charge every attempt of the stage (once)."""
            nonlocal done
            if done:
                return
            done = True
            facts.upstream_s += time.monotonic() - t0
            if whole is not None:  # charged as the non-streamed answer it is
                attempts.append(Attempt(body, answer=whole))
            elif json_answer:  # a JSON answer that was cut or unreadable: its worst case
                attempts.append(Attempt(body))
            elif complete or (accepted and tally.usage is not None):
                attempts.append(tally.attempt(body))
            elif rejected:  # closed by the gateway: the chunks read plus the model's declared overrun
                attempts.append(Attempt(body, streamed_tokens=tally.completion_tokens, cancelled=True))
            elif accepted:  # a stream that broke off without usage: what it produced is unknown
                attempts.append(Attempt(body))
            self._settle(facts, model, attempts)

        try:
            async with self._client.stream(request.api, body, deadline, attempts) as response:
                accepted = True
                if response.content_type == "application/json":
                    json_answer = True
                    whole = await read_completion(response, model)
                    finish()
                    facts.answered_by = model
                    yield WholeAnswer(whole)
                    return
                held: dict[str, Any] | None = None
                gate = self._gate
                # A prefix stage asked for the scorer's alternatives: the client gets what it asked.
                trim = gate is not None and request.wants_logprobs
                # Reading the answer (its chunks, the watched answer): a failure is one error.
                with reading_answer(model):
                    async for event in upstream_events(response, model):
                        tally.observe(event)
                        if self._watch is not None:
                            self._watch.observe(event)
                        if gate is not None:  # a prefix to hold: nothing is sent before the decision
                            if not gate[0].hold(event):
                                continue
                            if not gate[1](gate[0]):
                                rejected = True
                                response.close()  # the upstream stops generating what nobody reads
                                yield PrefixRejected()  # ``finish`` charges the cancelled call
                                return
                            started = True
                            facts.answered_by = model
                            overhead_ms = self._overhead_ms(time.monotonic() - t0)
                            yield StreamStart([*SSE_HEADERS, *facts.headers(overhead_ms)])
                            held_events, gate = gate[0].events, None
                            for kept in held_events[:-1]:
                                if not kept.get("choices") and not request.include_usage:
                                    continue
                                client_chunk(kept, model, request)
                                if trim:
                                    trim_alternatives(kept["choices"], request)
                                if held is not None:
                                    yield StreamChunk(sse(held))
                                held = kept
                            event = held_events[-1]  # relayed below, as any chunk after the start
                        if not started:
                            if not event.get("choices"):
                                continue  # nothing for the client yet (a usage-only or empty chunk)
                            started = True
                            facts.answered_by = model
                            overhead_ms = self._overhead_ms(time.monotonic() - t0)
                            yield StreamStart([*SSE_HEADERS, *facts.headers(overhead_ms)])
                        elif not event.get("choices") and not request.include_usage:
                            continue
                        client_chunk(event, model, request)
                        if trim:
                            trim_alternatives(event["choices"], request)
                        if held is not None:
                            yield StreamChunk(sse(held))
                        held = event
                    if gate is not None:  # the answer ended before the decision point
                        short = gate[0].answer(tally.usage)
                        if short is None:
                            raise UpstreamFailure(model, "malformed", "stream carried no choices")
                        complete = True
                        finish()  # charged as the stream it was (its usage, else its chunks)
                        yield ShortAnswer(short)
                        return
                    if held is None:
                        raise UpstreamFailure(model, "malformed", "stream carried no choices")
                    complete = True
                    finish()
                    if self._watch is not None:
                        self._watch.close()
                    held["cascade"] = facts.as_dict(self._overhead_ms())
                    yield StreamChunk(sse(held) + DONE, last=True)
        except UpstreamFailure as failure:
            if not started:
                raise  # the engine falls back to the cheap answer or answers with an HTTP error
            finish()
            facts.failures.append(failure.kind)
            facts.outcome = "error"
            yield StreamFailed(failure.to_gateway_error())
        except UnreadableAnswerError as error:  # charged by ``finish`` however it ends
            finish()
            facts.failures.append("unreadable")
            if not started:
                raise  # the endpoint answers 502 in the API's shape
            facts.outcome = "error"
            yield StreamFailed(error)
        finally:
            # Every ending passes here: done, failed, client gone, deadline, shutdown (cancellation).
            finish()
