"""One sample's shadow calls, labels and rows.

For a sample, every model of the serving policy's pool (its ``models`` that the config defines,
plus the reference model) gets a row. The request's own scored answers are reused; every other
model is called now, as the cascade calls a scored stage: the client's fields over that model's
request defaults, ``logprobs``/``top_logprobs`` of the policy's scorer, not streamed
(``gateway.stages.bodies.stage_body``). The request's final stage is among those called again: it was sent
without logprobs, and a row without a score is dropped by calibration.

Money: the calls' worst case (``money.charges.sent_bound``, the bound a spend reservation uses,
of each upstream request: every prompt, every choice, the completion cap it sends; times
``ModelConfig.billed_attempts`` for a model that retries uncertain attempts) is reserved in
the shadow budget before any call; a sample that does not fit is dropped
(``SampleDroppedError("spend_cap")``). Every attempt of each call is charged by the one rule
(``money.charges.attempt_charge``: its usage, else its worst case: a timeout, a cut answer, a
call cancelled mid-flight) and counted in ``cascade_shadow_cost_usd_total``, never in a
client's spend. An ``llm`` judge's calls are bounded and charged by the same rule. A failed call
leaves its model without a row (a missing answer, never a wrong one).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.config.learning import LearningConfig
from gateway.config.settings import ModelConfig
from gateway.learning.answers import Sample, StageAnswer, question_text
from gateway.learning.budget import ShadowBudget
from gateway.learning.router_inputs import Featurize, route_record
from gateway.stages.bodies import stage_body
from gateway.telemetry.metrics import LearningMetrics
from gateway.upstream.failure import UpstreamFailure
from gateway.upstream.pool import UpstreamPool
from gateway.wire.logs import log_event
from money.charges import Attempt, attempt_charge, call_bound, sent_bound, total_charge, undeclared_part
from policies import Policy
from traffic.judges.base import Judge, JudgeError, Verdict, label_answers
from traffic.rows import TrafficRow


class SampleDroppedError(Exception):
    """The sample is given up; ``reason`` is its ``cascade_learning_dropped_total`` label."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ShadowCall:
    """One call to make: the model, the exact upstream body, and its worst-case cost."""

    model: str
    body: bytes
    bound_usd: float


class _Tally:
    """USD a sample's calls have cost so far (kept current through cancellation)."""

    __slots__ = ("usd",)

    def __init__(self) -> None:
        self.usd = 0.0


class ShadowRunner:
    """Turns a sample into traffic rows (see the module docstring)."""

    def __init__(
        self,
        config: LearningConfig,
        models: Mapping[str, ModelConfig],
        request_timeout_s: float,
        pool: UpstreamPool,
        metrics: LearningMetrics,
        judge: Judge,
        budget: ShadowBudget,
        *,
        replica: str,
    ) -> None:
        """``config``: the config's ``learning``; ``models``: the configured models;
        ``request_timeout_s``: the bound of one sample's calls (``limits.request_timeout_s``);
        ``pool``: the upstream clients shadow calls go through (sessions of their own)."""
        self.models = models
        self.request_timeout_s = request_timeout_s
        self.pool = pool
        self.metrics = metrics
        self.judge = judge
        self.budget = budget
        self.replica = replica
        self.reference = config.reference_model
        self.log_text = config.log_text
        self.semaphore = asyncio.Semaphore(config.concurrency)
        # Computes a sample's router features when its request was not routed
        # (``gateway.learning.router_inputs``); the gateway sets it to its ``RouterRuntime.features``.
        self.featurize: Featurize | None = None

    def pool_of(self, policy: Policy) -> tuple[list[str], str]:
        """The models that get a row (policy order) and the reference model.

        The default reference is the pool model of highest calibrated quality (ties: the costlier).
        """
        models = [m for m in policy.models if m in self.models]
        reference = self.reference or max(
            models, key=lambda m: (policy.models[m].quality, policy.models[m].mean_cost_usd)
        )
        if reference not in models:
            models.append(reference)
        return models, reference

    def plan_call(self, sample: Sample, model: str) -> ShadowCall:
        """The call the cascade would make to ``model`` as a scored stage, and its worst case."""
        config = self.models[model]
        body = stage_body(sample.request, config, top_k=sample.policy.scorer.top_k, stream=False)
        # Every attempt that may be billed (a model retrying uncertain attempts: each of them).
        bound = sent_bound(config.price, body, config.limits).usd * config.billed_attempts
        return ShadowCall(model, body, bound)

    async def rows(self, sample: Sample) -> list[TrafficRow]:
        """Call, label and build the sample's rows; SampleDroppedError when the budget refuses it."""
        models, reference = self.pool_of(sample.policy)
        # A model that declares no bound for a priced part the request carries is not called: its
        # cost could not be bounded (money.charges.undeclared_part); it gets no row.
        calls = [
            self.plan_call(sample, m)
            for m in models
            if m not in sample.answers and undeclared_part(sample.request.body, self.models[m].limits) is None
        ]
        hold = self.budget.reserve(sum(c.bound_usd for c in calls))
        if hold is None:
            raise SampleDroppedError("spend_cap")
        tally = _Tally()
        deadline = time.monotonic() + self.request_timeout_s
        try:
            # return_exceptions: an unexpected error in one call must not leave the others running
            # unawaited (and their cost outside the settled amount).
            results = await asyncio.gather(
                *(self._call(sample, c, deadline, tally) for c in calls), return_exceptions=True
            )
        finally:
            self.budget.settle(hold, tally.usd)
        answers = dict(sample.answers)
        for call, result in zip(calls, results, strict=True):
            if isinstance(result, StageAnswer):
                answers[call.model] = result
            elif isinstance(result, BaseException):
                log_event("shadow_call_failed", level=logging.WARNING, model=call.model, error=repr(result))
                self.metrics.child(self.metrics.shadow_calls, call.model, "failed").inc()
        question = question_text(sample.request)
        labels = await self._labels(question, reference, answers)
        route = await route_record(sample, self.featurize)
        return [
            self._row(sample, m, answers[m], labels.get(m), question, route) for m in models if m in answers
        ]

    async def _call(
        self, sample: Sample, call: ShadowCall, deadline: float, tally: _Tally
    ) -> StageAnswer | None:
        """One shadow call under the concurrency bound; None when it failed (a missing answer)."""
        metrics, model = self.metrics, call.model
        config = self.models[model]
        async with self.semaphore:
            attempts: list[Attempt] = []
            try:
                reply = await self.pool[model].complete(sample.request.api, call.body, deadline, attempts)
            except UpstreamFailure as failure:
                outcome = "timeout" if failure.kind == "timeout" else "failed"
                metrics.child(metrics.shadow_calls, model, outcome).inc()
                # The row is missing for good: the operator sees why (the message is redacted).
                log_event(
                    "shadow_call_failed", level=logging.WARNING, model=model, kind=failure.kind,
                    status=failure.status, error=str(failure),
                )  # fmt: skip
                return None
            except asyncio.CancelledError:
                metrics.child(metrics.shadow_calls, model, "cancelled").inc()
                raise
            finally:
                # Every attempt that may have been billed (a timeout, a cut answer, a cancellation:
                # its worst case) is charged by the one rule, whatever happened to the call.
                charge = total_charge([attempt_charge(config.price, a, config.limits) for a in attempts])
                tally.usd += charge.usd
                metrics.child(metrics.shadow_cost, model).inc(charge.usd)
        policy = sample.policy
        # A black-box scorer's extra calls are not made for a shadow row: it is kept unscored.
        scorer = policy.scorer
        score = None if scorer.is_blackbox else scorer.score_reply(reply.body)
        answer = StageAnswer.from_reply(reply.body, reply.seconds, score, charge)
        metrics.child(metrics.shadow_calls, model, "ok").inc()
        return answer

    async def _labels(
        self, question: str, reference: str, answers: dict[str, StageAnswer]
    ) -> dict[str, Verdict | JudgeError]:
        """The judge's verdicts against the reference answer; none when the reference is missing."""
        metrics, judge_name = self.metrics, self.judge.name
        if reference not in answers:
            metrics.child(metrics.judge_outcomes, judge_name, "no_reference").inc(len(answers))
            return {}
        texts = {m: a.text() for m, a in answers.items()}
        bound = self._judge_bound(question, reference, texts)
        hold = self.budget.reserve(bound) if bound > 0 else None
        if bound > 0 and hold is None:
            raise SampleDroppedError("spend_cap")
        labels: dict[str, Verdict | JudgeError] | None = None
        try:
            labels = await label_answers(self.judge, question, reference, texts)
        finally:
            # A failed judge call is charged too (JudgeError.cost_usd); one cancelled mid-flight
            # may have been served: the sample's judging is then counted at its worst case.
            cost = bound if labels is None else sum(v.cost_usd for v in labels.values())
            if hold is not None:
                self.budget.settle(hold, cost)
            if cost:
                metrics.child(metrics.judge_cost, judge_name).inc(cost)
        assert labels is not None
        for model, verdict in labels.items():
            if model != reference:
                metrics.child(metrics.judge_outcomes, judge_name, _outcome(verdict)).inc()
        return labels

    def _judge_bound(self, question: str, reference: str, texts: dict[str, str]) -> float:
        """Worst case of a judge that calls a model (``llm``): the bound of each request it sends."""
        price: Any = getattr(self.judge, "price", None)
        request_body: Any = getattr(self.judge, "request_body", None)
        if price is None or request_body is None:
            return 0.0
        total = 0.0
        for model, text in texts.items():
            if model != reference:
                body = request_body(question, texts[reference], text)
                total += call_bound(price, body, len(orjson.dumps(body))).usd
        return total

    def _row(
        self,
        sample: Sample,
        model: str,
        answer: StageAnswer,
        verdict: Verdict | JudgeError | None,
        question: str,
        route: dict[str, Any] | None = None,
    ) -> TrafficRow:
        return TrafficRow(
            query_id=sample.query_id,
            model=model,
            correct=verdict.correct if isinstance(verdict, Verdict) else None,
            prompt_tokens=answer.prompt_tokens,
            completion_tokens=answer.completion_tokens,
            cost_usd=answer.cost_usd,
            logprobs=answer.logprobs(),
            score=answer.score,
            latency_ms=round(answer.seconds * 1000, 3),
            kind=sample.kind,
            timestamp=sample.timestamp,
            tier=sample.tier,
            policy_id=sample.policy.policy_id,
            replica=self.replica,
            judge=verdict.judge if isinstance(verdict, Verdict) else None,
            route=route,
            prompt=question if self.log_text else None,
            response=answer.text() if self.log_text else None,
        )


def _outcome(verdict: Verdict | JudgeError) -> str:
    """``cascade_judge_outcomes_total`` label of one verdict."""
    if isinstance(verdict, JudgeError):
        return "error"
    if verdict.correct is None:
        return "undecided"
    return "agree" if verdict.correct >= 0.5 else "disagree"
