"""The live final stage of a streamed request: relay the upstream's SSE, charge what was streamed.

The cascade engine (gateway.engine.cascade) drives a streamed request as an async iterator of
client-ready events (``StreamStart``, ``StreamChunk``, ``StreamFailed``); the endpoint only writes
them. ``LiveRelay`` is the part of that iterator that relays one upstream stream:

* the client's response starts only at the first upstream chunk that carries a choice, so an
  upstream that answers 200 and then sends nothing usable (``choices: []``, non-object choices,
  broken JSON, an error event) fails *before* the client saw a byte and can still fall back to
  the cheap answer (or a 502/504);
* a failure after the start ends the stream with an SSE ``error`` event (never a silent cut),
  unless the relay has a ``finish`` that continues the answer from the next stage
  (gateway.streaming.stream_finish: a committed prefix stream);
* every attempt of the stage is charged, however the stream ends, by the one charging rule
  (``money.charges.attempt_charge``, through the engine's ``settle``). Each exit of the relay
  names its ``Ending`` and ``ending_attempt`` alone (gateway.streaming.live_charge, with
  ``StreamTally`` and ``LiveCall``) turns it into the 200 attempt's charge: the
  usage its stream reported, else, when it ran to its end, what it delivered (``StreamTally``), or
  the whole answer it sent; one that broke off without a usage (cut, timed out, unreadable, left
  by its client), or whose JSON answer could not be read, at its worst case: the provider may have
  produced more than the gateway read; one the gateway closed itself (a rejected prefix) at the
  chunks read plus the model's declared overrun. A ``LiveCall`` settles once, at its first ending;
  a client that disconnects, the request deadline and a shutdown end it in a ``finally`` that runs
  on cancellation.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from gateway.stages.bodies import trim_alternatives
from gateway.stages.decision import SlowFirstToken
from gateway.stages.outcomes import StreamChunk, StreamEvent, StreamFailed, StreamStart
from gateway.streaming.live_charge import Ending, LiveCall, Settle
from gateway.streaming.no_deadline import NO_DEADLINE, NoDeadline
from gateway.streaming.prefix_commit import PrefixGate
from gateway.streaming.sse import DONE, SSE_HEADERS, SseLines, sse, upstream_batches
from gateway.upstream.client import UpstreamClient
from gateway.upstream.completion import read_completion
from gateway.upstream.failure import UpstreamFailure
from gateway.wire.answer_reading import READ_FAILURES, unreadable
from gateway.wire.errors import UnreadableAnswerError
from gateway.wire.facts import CascadeFacts
from gateway.wire.requests import ParsedRequest
from money.charges import Charge


class Watch(Protocol):
    """Sees a live stream's upstream chunks as they are read, and its end (``LiveRelay``'s ``watch``)."""

    def observe(self, event: dict[str, Any]) -> None:
        """One upstream chunk, before it is made the client's."""

    def close(self) -> None:
        """The stream ran to its end (and is charged)."""


class Finish(Protocol):
    """Finishes a committed stream that broke (gateway.streaming.stream_finish.StreamFinish)."""

    def observe(self, event: dict[str, Any]) -> None:
        """One upstream chunk of the stream, before it is made the client's."""

    def rest(self, failure: UpstreamFailure, deadline: float) -> AsyncGenerator[dict[str, Any], None] | None:
        """The rest of the answer from the next stage (its chunks, charged however it ends), or
        None when the stream cannot be finished."""


# The engine's decision on a held prefix (gateway.streaming.prefix_commit): True commits to the stage.
Decide = Callable[[PrefixGate], bool]


@dataclass(slots=True, frozen=True)
class PrefixRejected:
    """The held prefix was not committed to: the stage's call is cancelled (and charged)."""


@dataclass(slots=True, frozen=True)
class ShortAnswer:
    """The stream ended before the prefix's decision point: its whole answer, to decide as a buffered
    one; ``seconds`` and ``charge``: the call's time and charge (for the traffic sampler)."""

    body: dict[str, Any]
    seconds: float
    charge: Charge


@dataclass(slots=True, frozen=True)
class WholeAnswer:
    """The upstream ignored ``stream`` and sent one JSON completion (the engine replays it, or decides
    it as a cheap stage's); ``seconds`` and ``charge``: the call's time and charge."""

    body: dict[str, Any]
    seconds: float
    charge: Charge


@dataclass(slots=True, frozen=True)
class Opening:
    """The chunks a started stream relays first (read before its start, already counted and
    watched) and the rest of the upstream read the last of them came in (not yet)."""

    events: list[dict[str, Any]]
    rest: list[dict[str, Any]]


# What a relay yields: client events, or (before the start) what a prefix stage decides on.
RelayEvent = StreamEvent | WholeAnswer | PrefixRejected | ShortAnswer


class LiveRelay:
    """Relays one upstream stream as client events and charges it (see the module docstring)."""

    def __init__(
        self,
        client: UpstreamClient,
        request: ParsedRequest,
        facts: CascadeFacts,
        settle: Settle,
        started: float,
        watch: Watch | None = None,
        gate: tuple[PrefixGate, Decide] | None = None,
        first_token_s: float | None = None,
        finish: Finish | None = None,
    ):
        """``settle(facts, model, attempts)`` charges the stage's attempts; ``started`` is the
        request's perf_counter; ``watch`` sees every upstream chunk before it is made the client's
        and is closed when the stream ran to its end, once it is charged, before the last chunk
        carries the facts (the final stage's ``StreamedAnswer`` of gateway.stages.answer_review, a
        drawn prefix stage's ``KeptStream`` of gateway.streaming.prefix_stream). ``gate``: a
        cheap stage under the ``prefix`` rule (gateway.streaming.prefix_commit): its chunks are held
        until the gate's decision point, then ``decide(gate)`` commits (they are relayed, the stream
        goes on live) or not (``PrefixRejected``: the call is cancelled); a stream that ends first is
        a ``ShortAnswer``. ``first_token_s``: the model's first-token deadline (None: none), from
        the call's start to the response's start (or the decision before it): past it the call is
        cancelled, charged as a stream the gateway closed (``Ending.REJECTED``; before its 200, its
        worst case) and ``SlowFirstToken`` raised; the rest of the stream has the whole timeout.
        ``finish``: a committed stream that breaks after its start is finished by the next stage
        when it can (gateway.streaming.stream_finish), else it ends with the error event."""
        self._first_token_s = first_token_s
        self._finish = finish
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

    async def events(self, body: bytes, deadline: float) -> AsyncGenerator[RelayEvent, None]:
        """Client events of the stream ``body`` asks for; UpstreamFailure only before the start."""
        call = LiveCall(self._client.name, body, self._facts, self._settle)
        facts, started = self._facts, False
        facts.models_called.append(call.model)
        # A stand-in without a timer when the model has no first-token deadline (the usual case).
        first_token = NO_DEADLINE if self._first_token_s is None else asyncio.timeout(self._first_token_s)
        try:
            opened = self._client.stream(self._request.api, body, deadline, call.attempts)
            async with first_token, opened as response:
                if response.content_type == "application/json":
                    first_token.reschedule(None)  # one whole answer: no first token to wait for
                    yield await self._whole(response, call)
                    return
                call.interrupted = Ending.BROKEN
                # Reading the answer (its chunks, the watched answer): a failure is one error.
                try:
                    lines = SseLines(call.model, self._client.redact)
                    first = call.first_chunk if facts.trace is not None else None  # the console's
                    batches = upstream_batches(response, lines, first)
                    opening = await self._opening(batches, call, response, first_token)
                    first_token.reschedule(None)  # the start (or the decision) came in time
                    if not isinstance(opening, Opening):  # decided before the start (and charged)
                        yield opening
                        return
                    started = True
                    yield self._start(call)
                    async for chunk in self._started_stream(opening, (batches, lines), call, deadline):
                        yield chunk
                except READ_FAILURES as exc:
                    raise unreadable(call.model, exc) from exc
        except UpstreamFailure as failure:
            if not started:
                if failure.kind == "circuit_open":  # skipped, never called
                    facts.models_called.remove(call.model)
                raise  # the engine falls back to the cheap answer or answers with an HTTP error
            call.end(call.interrupted)
            facts.failures.append(failure.kind)
            facts.outcome = "error"
            yield StreamFailed(failure.to_gateway_error())
        except TimeoutError:
            if not first_token.expired():
                raise
            # Closed by the gateway: a stream that started is charged as a rejected prefix is.
            call.end(Ending.REJECTED if call.interrupted is Ending.BROKEN else call.interrupted)
            raise SlowFirstToken(call.model, self._first_token_s or 0.0) from None
        except UnreadableAnswerError as error:
            call.end(call.interrupted)
            facts.failures.append("unreadable")
            if not started:
                raise  # the endpoint answers 502 in the API's shape
            facts.outcome = "error"
            yield StreamFailed(error)
        finally:
            # Every ending passes here: done, failed, client gone, deadline, shutdown (cancellation).
            call.end(call.interrupted)

    async def _started_stream(
        self,
        opening: Opening,
        upstream: tuple[AsyncIterator[list[dict[str, Any]]], SseLines],
        call: LiveCall,
        deadline: float,
    ) -> AsyncGenerator[StreamChunk, None]:
        """The client's chunks after the start, to the last one: one write per upstream read (the
        events that arrived together; the read that ends the stream with the last chunk). A break
        raises UpstreamFailure (the caller's error event), unless the ``finish`` continues the
        answer: the broken call is charged as broken and the continuation's chunks follow (its own
        failure raises)."""
        out = ClientChunks(call.model, self._request, trim=self._gate is not None)
        relay, (batches, lines) = out.relay, upstream
        data = out.relay_all(opening.events)
        finished = False
        try:
            if opening.rest:
                data += self._relayed(opening.rest, call, out)
            if data and not lines.done:
                yield StreamChunk(data)
                data = b""
            async for batch in batches:
                data += self._relayed(batch, call, out)
                if data and not lines.done:  # the last read's goes with the closing chunk, at once
                    yield StreamChunk(data)
                    data = b""
        except UpstreamFailure as failure:
            rest = None if self._finish is None else self._finish.rest(failure, deadline)
            if rest is None:
                raise  # no continuation: the error event
            call.end(call.interrupted)  # the broken call, charged as broken
            self._facts.failures.append(failure.kind)
            async with aclosing(rest):
                async for event in rest:
                    if piece := relay(event):
                        yield StreamChunk(piece)
            finished = True
        yield self._closing(call, out, finished, data)

    def _relayed(self, batch: list[dict[str, Any]], call: LiveCall, out: ClientChunks) -> bytes:
        """Upstream chunks read after the start: counted, watched, made the client's SSE bytes."""
        call.tally.observe_all(batch)
        if self._watch is not None or self._finish is not None:
            for event in batch:
                self._observe(event)
        return out.relay_all(batch)

    async def _whole(self, response: Any, call: LiveCall) -> WholeAnswer:
        """An upstream that ignored ``stream``: its one JSON answer, read and charged as such."""
        call.interrupted = Ending.CUT_JSON
        call.whole = await read_completion(response, call.model)
        call.end(Ending.WHOLE)
        self._facts.answered_by = call.model
        return WholeAnswer(call.whole, call.seconds, call.charged)

    async def _opening(
        self,
        batches: AsyncIterator[list[dict[str, Any]]],
        call: LiveCall,
        response: Any,
        first_token: asyncio.Timeout | NoDeadline,
    ) -> Opening | PrefixRejected | ShortAnswer:
        """Read up to the response's start: the chunks to relay first (the first that carries a
        choice; with a first-token deadline, up to the first that carries output; under a gate, the
        chunks held to its decision point, committed to) and the rest of their read, or what ends
        the stream before the start: a rejected prefix (the call cancelled) or an answer that ended
        before the gate's decision point. Nothing is sent to the client before. The first output
        token ends ``first_token``."""
        gate, held = self._gate, []
        waiting = first_token.when() is not None
        async for batch in batches:
            for at, event in enumerate(batch):
                call.tally.observe(event)
                self._observe(event)
                if waiting and call.tally.completion_tokens:
                    first_token.reschedule(None)  # it came in time: the rest has the whole timeout
                    waiting = False
                if gate is None:
                    if event.get("choices"):  # a usage-only or empty chunk: nothing for the client yet
                        held.append(event)
                        if not waiting:
                            return Opening(held, batch[at + 1 :])
                elif gate[0].hold(event):  # the decision point
                    if gate[1](gate[0]):
                        return Opening(gate[0].events, batch[at + 1 :])
                    call.end(Ending.REJECTED)
                    response.close()  # the upstream stops generating what nobody reads
                    return PrefixRejected()
        if held:  # choices without output (an empty answer): relayed as they are
            return Opening(held, [])
        short = gate[0].answer(call.tally.usage) if gate is not None else None
        if short is None:
            raise UpstreamFailure(call.model, "malformed", "stream carried no choices")
        call.end(Ending.COMPLETE)  # charged as the stream it was (its usage, else its chunks)
        return ShortAnswer(short, call.seconds, call.charged)

    def _observe(self, event: dict[str, Any]) -> None:
        """Show one upstream chunk to the watch and the finish, before it is made the client's."""
        if self._watch is not None:
            self._watch.observe(event)
        if self._finish is not None:
            self._finish.observe(event)

    def _closing(
        self, call: LiveCall, out: ClientChunks, finished: bool = False, before: bytes = b""
    ) -> StreamChunk:
        """The stream ran to its end: charged, its watched answer checked, the last chunk with the
        request's facts (after ``before``: the chunks of the read that ended it). ``finished``: it
        broke and was finished by the next stage (its watch sees no whole answer of the model)."""
        call.end(Ending.COMPLETE)
        if self._watch is not None and not finished:
            self._watch.close()
        return StreamChunk(before + out.last(self._facts.as_dict(self._overhead_ms())), last=True)

    def _start(self, call: LiveCall) -> StreamStart:
        """The response's start: the SSE headers and the decision's ``x-cascade-*`` facts."""
        facts = self._facts
        facts.answered_by = call.model
        overhead_ms = self._overhead_ms(time.monotonic() - call.t0)
        return StreamStart([*SSE_HEADERS, *facts.headers(overhead_ms)])


class ClientChunks:
    """The upstream chunks made the client's, one kept back: the last one carries the facts."""

    __slots__ = ("_held", "_model", "_request", "_trim")

    def __init__(self, model: str, request: ParsedRequest, trim: bool):
        """``trim``: cut the alternatives to what the client asked (a prefix stage asked the
        scorer's)."""
        self._model = model
        self._request = request
        self._trim = trim and request.wants_logprobs
        self._held: dict[str, Any] | None = None

    def relay(self, event: dict[str, Any]) -> bytes:
        """Take ``event`` (after the start); the SSE of the chunk it follows (b"": none to send)."""
        return self.relay_all((event,))

    def relay_all(self, events: Iterable[dict[str, Any]]) -> bytes:
        """Take ``events`` in order (``relay`` of each, in one call): the SSE of the chunks they
        follow. Made the client's: the configured model name, logprobs only if asked (cut to what
        was asked, ``trim``); a chunk without a choice only when the client asked for usage."""
        request, model, trim = self._request, self._model, self._trim
        usage, logprobs = request.include_usage, request.wants_logprobs
        held = self._held
        parts: list[bytes] = []
        for event in events:
            choices = event.get("choices")
            if not choices and not usage:
                continue
            event["model"] = model
            if not logprobs:
                for choice in choices or ():
                    if isinstance(choice, dict) and choice.get("logprobs") is not None:
                        choice["logprobs"] = None
            elif trim:
                trim_alternatives(choices or [], request)
            if held is not None:
                parts += (b"data: ", orjson.dumps(held), b"\n\n")
            held = event
        self._held = held
        return b"".join(parts)

    def last(self, cascade: dict[str, Any]) -> bytes:
        """The chunk kept back with the request's ``cascade`` facts, and the stream's end."""
        held = self._held
        assert held is not None  # the response started at a chunk that carries a choice
        held["cascade"] = cascade
        return sse(held) + DONE
