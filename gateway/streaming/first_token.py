"""A buffered stage of a model with a first-token deadline: requested streamed, read whole.

Contracts: docs/contracts.md#faults (first-token deadline).

A model's ``first_token_timeout_s`` (gateway.config.settings.ModelConfig) can only be seen on a
stream: a non-streamed call shows nothing until its whole answer. So a stage that is read whole (a
scored stage, or a final stage of a non-streamed request) of such a model is requested streamed
and its chunks are held to the end of the stream (``gateway.streaming.prefix_commit.PrefixGate``
without a decision point), then assembled into the non-streamed answer the stage would have had
(text, logprobs, tool calls, finish reason, usage). The live relay (gateway.streaming.live) runs
the deadline and charges the call however it ends: its usage, else the chunks it read, else, cut
before its first token, as a stream the gateway closed (``money.charges.cancelled_stream_charge``).
A late first token raises ``gateway.stages.decision.SlowFirstToken``; once the first token arrived
the rest has the model's whole ``timeout_s``.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.streaming.live import LiveRelay, ShortAnswer, WholeAnswer
from gateway.streaming.live_call import Settle
from gateway.streaming.prefix_commit import PrefixGate
from gateway.upstream.client import UpstreamClient, UpstreamFailure
from gateway.wire.facts import CascadeFacts
from gateway.wire.requests import ParsedRequest
from money.charges import Charge


def _never(gate: PrefixGate) -> bool:
    """The decision of a gate without a decision point: never asked."""
    raise AssertionError("a whole-answer gate has no decision point")


async def streamed_answer(
    client: UpstreamClient,
    request: ParsedRequest,
    body: bytes,
    deadline: float,
    facts: CascadeFacts,
    settle: Settle,
    first_token_s: float,
) -> tuple[dict[str, Any], float, Charge]:
    """Call ``client`` with the streamed ``body`` under a first-token deadline of ``first_token_s``
    and read its whole answer: (the answer as a non-streamed body, the call's seconds, its charge).

    Raises ``UpstreamFailure`` (``SlowFirstToken`` for a late first token) or
    ``UnreadableAnswerError``; the call is listed in ``models_called`` and charged either way."""
    gate = PrefixGate(None, legacy=request.api != "chat")
    started = time.perf_counter()
    relay = LiveRelay(client, request, facts, settle, started, None, (gate, _never), first_token_s)
    events = relay.events(body, deadline)
    answer = await anext(events)
    # The relay ends right after the answer: read it to its end, so that its call ends answered.
    async for _ in events:
        pass
    if not isinstance(answer, ShortAnswer | WholeAnswer):  # a gate without a decision point
        raise UpstreamFailure(client.name, "malformed", "stream ended without an answer")
    return answer.body, answer.seconds, answer.charge
