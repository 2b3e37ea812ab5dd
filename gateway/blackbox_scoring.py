"""Live black-box scoring: the extra calls that score a stage whose policy scorer needs no logprobs.

Contracts: docs/contracts.md#scorers and #charges; the scorers themselves are ``policies.blackbox``
(the very request builders and score functions calibration applies to the recorded calls).

After a scored stage's answer, by ``ScorerSpec.name``:

* ``verifier``: one call to the policy's verifier model (a configured model), asking whether the
  answer is right; the score is P(yes) from its first token's alternatives;
* ``consistency``: ``samples`` extra calls of the same stage at the spec's ``temperature``, one
  choice each, made concurrently; the score is their agreement with the answer
  (``ScorerSpec.equivalence``). Separate calls rather than one call with ``n``: llama.cpp's server
  (the local pool's, ``--parallel 2``) refuses ``n`` above its slot count (400 "Value must be
  between 1 <= value <= 2") and, with ``n: 2`` and ``max_tokens: 8``, answers two choices cut at
  8 tokens with a usage of 8 completion tokens: the usage would undercount what was generated;
* ``self_report``: one follow-up call to the stage model, its answer as the assistant's turn, asking
  for its confidence as a number.

Money: every extra call goes through the engine's ``_call``, so every attempt of it is charged with
``money.charges`` into the request's facts and the cost metric under the model it called (a call
that timed out, was cut or was cancelled mid-flight: its worst case), and it is listed in the
request's ``models_called`` (``x-cascade-models-called``, the log line) like a stage. The
request's reservation includes the extra calls' worst case (``reserve_scoring_usd``, added by
``gateway.runtime.Gateway.reserve_estimate``). The verifier
and self-report prompts quote the answer, unknown when the reservation is made: the reservation
allows ``ANSWER_BYTES_PER_TOKEN`` bytes of quoted answer per completion token the stage may be
billed, and an answer whose quoting request would be larger than that bound is not sent (its score
is missing), so what is spent never exceeds what was reserved.

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

from gateway.config import ModelConfig
from gateway.facts import CascadeFacts
from gateway.logs import log_event
from gateway.requests import ParsedRequest
from gateway.upstream import UpstreamFailure, UpstreamReply
from money.charges import Charge, call_bound, completion_tokens_bound, sent_bound
from policies import blackbox, score_response
from policies.request_defaults import merge_request_defaults
from policies.schema import ScorerSpec
from traffic.judges.base import JudgeError
from traffic.judges.equivalence import equivalence

# The escalation reason of a stage whose black-box scorer's own call failed (docs/contracts.md#metrics).
SCORER_FAILED = "scorer_failed"
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
    scorer, with extra calls made through the engine's charged ``call``."""

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
        if not spec.is_blackbox:
            return StageScore(score_response(reply, spec.name, spec.top_k, spec.tokens))
        if request.kind != "chat":
            return StageScore(None, failed=True)
        answer = blackbox.answer_text(reply)
        if not answer:
            return StageScore(None)
        stage_body = orjson.loads(sent)
        before = facts.cost_usd
        try:
            if spec.name == "verifier":
                score = await self._verifier(spec, request, stage_body, answer, deadline, facts)
            elif spec.name == "consistency":
                score = await self._consistency(spec, model, request, sent, answer, deadline, facts)
            else:
                score = await self._self_report(spec, model, request, stage_body, answer, deadline, facts)
        except UpstreamFailure:
            score = None
        return StageScore(score, facts.cost_usd - before, failed=score is None)

    async def _verifier(
        self,
        spec: ScorerSpec,
        request: ParsedRequest,
        stage_body: dict[str, Any],
        answer: str,
        deadline: float,
        facts: CascadeFacts,
    ) -> float | None:
        assert spec.verifier is not None
        name = spec.verifier.model
        body = verifier_body(spec, self._models[name], stage_body, answer)
        sent = orjson.dumps(body)
        if len(sent) > quoting_bound(verifier_body(spec, self._models[name], stage_body, ""), stage_body):
            return None
        reply, _ = await self._call(name, request, sent, deadline, facts)
        return blackbox.verifier_score(reply.body)

    async def _consistency(
        self,
        spec: ScorerSpec,
        model: str,
        request: ParsedRequest,
        sent: bytes,
        answer: str,
        deadline: float,
        facts: CascadeFacts,
    ) -> float | None:
        assert spec.samples is not None and spec.equivalence is not None
        sample = sample_body(spec, sent)
        # return_exceptions: every sample runs to its end (and is charged) even when one fails;
        # a cancellation still cancels them all, each charged its worst case by ``call``.
        results = await asyncio.gather(
            *(self._call(model, request, sample, deadline, facts) for _ in range(spec.samples)),
            return_exceptions=True,
        )
        texts: list[str] = []
        for result in results:
            if isinstance(result, UpstreamFailure):
                return None  # the score is a share of all k samples, as calibration computes it
            if isinstance(result, BaseException):
                raise result
            texts.append(blackbox.answer_text(result[0].body) or "")
        equivalent = equivalence(spec.equivalence)
        if spec.equivalence != "similarity":
            return blackbox.consistency_score(answer, texts, equivalent)
        try:  # an encoder's forward passes: off the event loop
            return await asyncio.to_thread(blackbox.consistency_score, answer, texts, equivalent)
        except JudgeError as exc:  # the encoder is not installed: no score, said in the log
            log_event("scorer_unavailable", level=logging.WARNING, scorer=spec.name, error=str(exc))
            return None

    async def _self_report(
        self,
        spec: ScorerSpec,
        model: str,
        request: ParsedRequest,
        stage_body: dict[str, Any],
        answer: str,
        deadline: float,
        facts: CascadeFacts,
    ) -> float | None:
        body = blackbox.self_report_request(stage_body, answer, prompt=spec.self_report_prompt)
        sent = orjson.dumps(body)
        empty = blackbox.self_report_request(stage_body, "", prompt=spec.self_report_prompt)
        if len(sent) > quoting_bound(empty, stage_body):
            return None
        reply, _ = await self._call(model, request, sent, deadline, facts)
        return blackbox.self_report_score(blackbox.answer_text(reply.body))


def verifier_body(
    spec: ScorerSpec, verifier: ModelConfig, stage_body: Mapping[str, Any], answer: str
) -> dict[str, Any]:
    """The verifier's request about ``answer`` to the question of the stage's messages.

    Sent like any call to a configured model, as collection sends it: the policy's request (its
    prompt, one token, ``top_k`` alternatives) over the verifier model's request defaults."""
    assert spec.verifier is not None
    body = blackbox.verifier_request(
        stage_body.get("messages") or [],
        answer,
        model=verifier.model,
        prompt=spec.verifier.prompt,
        top_logprobs=spec.top_k,
    )
    return merge_request_defaults(body, verifier.request_defaults)


def sample_body(spec: ScorerSpec, sent: bytes) -> bytes:
    """One consistency sample's upstream body: the stage's own request at the spec's temperature."""
    assert spec.temperature is not None
    return orjson.dumps(blackbox.sample_request(orjson.loads(sent), spec.temperature))


def quoting_bound(empty: Mapping[str, Any], stage_body: Mapping[str, Any]) -> int:
    """The largest request (bytes) that quotes a stage's answer: the request quoting nothing, plus
    ``ANSWER_BYTES_PER_TOKEN`` per completion token the stage may be billed."""
    return len(orjson.dumps(empty)) + ANSWER_BYTES_PER_TOKEN * completion_tokens_bound(dict(stage_body))


def stage_scoring_bound_usd(
    spec: ScorerSpec, models: Mapping[str, ModelConfig], model: str, sent: bytes
) -> float:
    """Worst-case USD of the scorer calls of stage ``model`` whose upstream body is ``sent``."""
    stage_body = orjson.loads(sent)
    price, limits = models[model].price, models[model].limits
    if spec.name == "consistency":
        assert spec.samples is not None
        return spec.samples * sent_bound(price, sample_body(spec, sent), limits).usd
    if spec.name == "verifier":
        assert spec.verifier is not None
        verifier = models[spec.verifier.model]
        empty = verifier_body(spec, verifier, stage_body, "")
        return call_bound(verifier.price, empty, quoting_bound(empty, stage_body), verifier.limits).usd
    empty = blackbox.self_report_request(stage_body, "", prompt=spec.self_report_prompt)
    return call_bound(price, empty, quoting_bound(empty, stage_body), limits).usd


def reserve_scoring_usd(
    spec: ScorerSpec,
    models: Mapping[str, ModelConfig],
    stages: Sequence[tuple[str, bytes]],
    request: ParsedRequest,
) -> float:
    """Worst-case USD of the scorer calls of a route's scored ``stages`` ((model, upstream body) of
    every stage but the last); 0 for a logprob scorer and for a legacy completion (not scored)."""
    if not spec.is_blackbox or request.kind != "chat":
        return 0.0
    return sum(stage_scoring_bound_usd(spec, models, model, sent) for model, sent in stages)
