"""Live black-box scoring: the extra calls that score a stage whose policy scorer needs no logprobs.

Contracts: docs/contracts.md#scorers and #charges; the scorers themselves are ``policies.blackbox``
(the very request builders and score functions calibration applies to the recorded calls).

After a scored stage's answer, the scorer's definition (``policies.scorers.REGISTRY``, by
``ScorerSpec.name``) says which calls to make: ``Calls.calls`` of them, made concurrently, to the
scorer's own model (the verifier's, a configured model) or to the stage's model, each built by
``Calls.body`` from the stage's upstream body and its answer; the score is ``Calls.score`` of what
their replies give (``Calls.reading``). A repeated scorer (consistency) makes separate calls rather
than one call with ``n``: llama.cpp's server (the local pool's, ``--parallel 2``) refuses ``n``
above its slot count (400 "Value must be between 1 <= value <= 2") and, with ``n: 2`` and
``max_tokens: 8``, answers two choices cut at 8 tokens with a usage of 8 completion tokens: the
usage would undercount what was generated.

Money: every extra call goes through the engine's ``_call``, so every attempt of it is charged with
``money.charges`` into the request's facts and the cost metric under the model it called (a call
that timed out, was cut or was cancelled mid-flight: its worst case), and it is listed in the
request's ``models_called`` (``x-cascade-models-called``, the log line) like a stage. The request's
reservation includes the extra calls' worst case (``reserve_scoring_usd``, added by
``gateway.assembly.runtime.Gateway.reserve_estimate``). A request that quotes the answer
(``Calls.quotes_answer``: the verifier's, the self-report's) is unknown when the reservation is
made: the reservation allows ``ANSWER_BYTES_PER_TOKEN`` bytes of quoted answer per completion token
the stage may be billed, and an answer whose quoting request would be larger than that bound is not
sent (its score is missing), so what is spent never exceeds what was reserved.

A scorer call that fails (upstream failure, or a reply the score function cannot read) leaves the
stage without a score: ``on_missing_score`` decides, with escalation reason ``scorer_failed``. An
answer without text (a pure tool call, an empty answer) is not scored and makes no extra call.
Black-box scorers score chat requests (every edge but the legacy ``/v1/completions`` translates
into one); a legacy completion gets no score and no extra call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.config.settings import ModelConfig
from gateway.upstream.client import UpstreamReply
from gateway.upstream.failure import UpstreamFailure
from gateway.wire.facts import CascadeFacts
from gateway.wire.logs import log_event
from gateway.wire.requests import ParsedRequest
from money.charges import Charge, call_bound, completion_tokens_bound, sent_bound
from policies import blackbox
from policies.schema import ScorerSpec
from policies.scorers import Calls, CallSettings, blackbox_calls
from traffic.judges.base import JudgeError
from traffic.judges.equivalence import equivalence

# Bytes of quoted answer the reservation allows per completion token the stage may be billed. The
# demo's answers (data/local/arithmetic-runs.jsonl.gz, Qwen2.5) average 2.0 bytes per completion
# token, the longest of their 18,351 tokens and alternatives is 21 bytes; 16 per token leaves room
# for long tokens and for JSON escaping (a quote or newline is 2 bytes in the request), and an
# answer beyond it is not quoted (no score) rather than spent past the reservation.
ANSWER_BYTES_PER_TOKEN = 16

# The engine's charged call: (model, request, upstream body, deadline, facts) -> (reply, charge).
Call = Callable[[str, ParsedRequest, bytes, float, CascadeFacts], Awaitable[tuple[UpstreamReply, Charge]]]


@dataclass(frozen=True, slots=True)
class StageScore:
    """The score of one stage's answer.

    ``score``: None when missing. ``usd``: what the extra calls were charged (already in the facts).
    ``failed``: a scorer call failed or gave nothing readable (escalation reason ``scorer_failed``).
    """

    score: float | None
    usd: float = 0.0
    failed: bool = False


class StageScorer:
    """Scores a stage's answer: from its logprobs (``policies.score_response``), or, for a black-box
    scorer, with the extra calls of its definition (``policies.scorers.Calls``) made through the
    engine's charged ``call``."""

    def __init__(self, models: Mapping[str, ModelConfig], call: Call):
        self._models = models
        self._call = call

    async def score(
        self,
        spec: ScorerSpec,
        model: str,
        request: ParsedRequest,
        sent: bytes,
        reply: dict[str, Any],
        deadline: float,
        facts: CascadeFacts,
    ) -> StageScore:
        """Score ``reply``, the answer of stage ``model`` to the upstream body ``sent``."""
        calls = blackbox_calls(spec.name)
        if calls is None:
            return StageScore(spec.score_reply(reply))
        if request.api != "chat":
            return StageScore(None, failed=True)
        answer = blackbox.answer_text(reply)
        if not answer:
            return StageScore(None)
        before = facts.cost_usd
        try:
            score = await self._extra_calls(
                calls, spec, model, request, orjson.loads(sent), answer, deadline, facts
            )
        except UpstreamFailure:
            score = None
        return StageScore(score, facts.cost_usd - before, failed=score is None)

    async def _extra_calls(
        self,
        calls: Calls,
        spec: ScorerSpec,
        model: str,
        request: ParsedRequest,
        stage_body: dict[str, Any],
        answer: str,
        deadline: float,
        facts: CascadeFacts,
    ) -> float | None:
        """The scorer's calls on ``answer``, made concurrently, and the score of their replies."""
        settings = calls.settings(spec)
        callee = callee_name(calls, settings, model)
        config = self._models[callee]
        sent = orjson.dumps(calls.body(settings, stage_body, answer, config.model, config.request_defaults))
        if calls.quotes_answer:
            empty = calls.body(settings, stage_body, "", config.model, config.request_defaults)
            if len(sent) > quoting_bound(empty, stage_body):
                return None
        # return_exceptions: every call runs to its end (and is charged) even when one fails;
        # a cancellation still cancels them all, each charged its worst case by ``call``.
        results = await asyncio.gather(
            *(self._call(callee, request, sent, deadline, facts) for _ in range(calls.calls(settings))),
            return_exceptions=True,
        )
        readings: list[Any] = []
        for result in results:
            if isinstance(result, UpstreamFailure):
                return (
                    None  # a repeated scorer's score is a share of all its calls, as calibration computes it
                )
            if isinstance(result, BaseException):
                raise result
            readings.append(calls.reading(result[0].body))
        if spec.equivalence is None:
            return calls.score(answer, readings, None)
        equivalent = equivalence(spec.equivalence)
        if spec.equivalence != "similarity":
            return calls.score(answer, readings, equivalent)
        try:  # an encoder's forward passes: off the event loop
            return await asyncio.to_thread(calls.score, answer, readings, equivalent)
        except JudgeError as exc:  # the encoder is not installed: no score, said in the log
            log_event("scorer_unavailable", level=logging.WARNING, scorer=spec.name, error=str(exc))
            return None


def callee_name(calls: Calls, settings: CallSettings, stage_model: str) -> str:
    """The configured model a scorer's calls go to: its own (the verifier's) or the scored stage's."""
    if calls.own_model:
        assert settings.model is not None
        return settings.model
    return stage_model


def quoting_bound(empty: Mapping[str, Any], stage_body: Mapping[str, Any]) -> int:
    """The largest request (bytes) that quotes a stage's answer: the request quoting nothing, plus
    ``ANSWER_BYTES_PER_TOKEN`` per completion token the stage may be billed."""
    return len(orjson.dumps(empty)) + ANSWER_BYTES_PER_TOKEN * completion_tokens_bound(dict(stage_body))


def stage_scoring_bound_usd(
    spec: ScorerSpec, models: Mapping[str, ModelConfig], model: str, sent: bytes
) -> float:
    """Worst-case USD of the scorer calls of stage ``model`` whose upstream body is ``sent``.

    Per call: a request quoting the answer is bounded by ``quoting_bound`` (a larger one is not
    sent), any other is the very body sent; times the number of calls, times the attempts of a call
    that may be billed (``ModelConfig.billed_attempts``)."""
    calls = blackbox_calls(spec.name)
    if calls is None:
        return 0.0
    stage_body = orjson.loads(sent)
    settings = calls.settings(spec)
    callee = models[callee_name(calls, settings, model)]
    empty = calls.body(settings, stage_body, "", callee.model, callee.request_defaults)
    if calls.quotes_answer:
        one = call_bound(callee.price, empty, quoting_bound(empty, stage_body), callee.limits).usd
    else:
        one = sent_bound(callee.price, orjson.dumps(empty), callee.limits).usd
    return calls.calls(settings) * one * callee.billed_attempts  # each may retry an uncertain attempt


def reserve_scoring_usd(
    spec: ScorerSpec,
    models: Mapping[str, ModelConfig],
    stages: Sequence[tuple[str, bytes]],
    request: ParsedRequest,
) -> float:
    """Worst-case USD of the scorer calls of a route's scored ``stages`` ((model, upstream body) of
    every stage but the last); 0 for a logprob scorer and for a legacy completion (not scored)."""
    if not spec.is_blackbox or request.api != "chat":
        return 0.0
    return sum(stage_scoring_bound_usd(spec, models, model, sent) for model, sent in stages)
