"""The decision on a scored stage: one for the buffered stages and for a ``prefix`` tier's cheap stage.

Contracts: docs/contracts.md#scorers and #faults; the reasons: docs/tool-calls.md#escalation-reasons.

Once a scored stage's answer is scored (gateway.stages.blackbox_scoring), ``StageDecision.decide``
records the score (the facts, the confidence histogram, the drift window), hands the answer to the
traffic sampler when it drew the request (``CascadeFacts.keep_answer``: the sampler reuses it and
never buys it again, docs/traffic.md), reviews it (gateway.stages.answer_review) and says why it
escalates (an ``EscalationReason``), or None to accept it. The engine's buffered stages
(gateway.engine.cascade) and a prefix tier's cheap stage that ended before its decision point
(gateway.streaming.prefix_stream) both call it. A prefix decided on its first tokens has no answer to
review yet: ``decide_prefix`` decides on its score alone.

After a failed call both paths follow one rule (docs/contracts.md#faults): a timeout marks its
upstream (``Timeouts``), a later stage served by an upstream that timed out in this request is
skipped (``next_stage``: two pool members of one llama-server; it would queue behind the abandoned
call under the same deadline), and with no stage left ``no_stage_left`` serves the last good answer
degraded, if the policy allows it, else the timeout's 504. A provider's content-policy refusal
(gateway.upstream.provider_errors) is the operator's call (``upstream_errors.content_policy``):
``return`` makes it the client's answer at once, at any stage (no later stage is called, no degraded
answer stands in for it); ``escalate`` treats it as any failed call (reason ``content_policy``).
Either way it is counted (``cascade_content_refusals_total``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gateway.config.settings import ModelConfig
from gateway.routing.tier_choice import RoutePlan
from gateway.stages.answer_review import AnswerReview, EscalationReason
from gateway.stages.blackbox_scoring import StageScore
from gateway.telemetry.metrics import GatewayMetrics
from gateway.upstream.failure import UpstreamFailure
from gateway.wire.answer_reading import READ_FAILURES, unreadable
from gateway.wire.errors import GatewayError, UpstreamTimeoutError
from gateway.wire.facts import CascadeFacts
from gateway.wire.requests import ParsedRequest
from money.charges import Charge
from policies import should_escalate
from policies.schema import Policy

SLOW_FIRST_TOKEN = "slow_first_token"


class SlowFirstToken(UpstreamFailure):
    """A stage's first token did not arrive within its model's ``first_token_timeout_s``: the gateway
    cancelled the call (charged by the one rule). A stage before the last escalates
    (``slow_first_token``); at the last stage, a timeout error (504)."""

    def __init__(self, model: str, seconds: float):
        super().__init__(model, SLOW_FIRST_TOKEN, f"no first token within {seconds:g}s")

    def to_gateway_error(self) -> GatewayError:
        """The client-facing timeout."""
        return UpstreamTimeoutError(f"upstream model {self.model!r} sent no first token in time")


class Timeouts:
    """The upstreams that timed out in one request, and the last of those timeouts (made at the
    request's first timeout: a request without one allocates nothing)."""

    __slots__ = ("last", "upstreams")

    def __init__(self, failure: UpstreamFailure, upstream: tuple[str, str]):
        self.last = failure
        self.upstreams = {upstream}


class StageDecision:
    """Decides scored stages and records their escalations (see the module docstring)."""

    def __init__(
        self,
        models: Mapping[str, ModelConfig],
        metrics: GatewayMetrics,
        review: AnswerReview,
        content_policy: str = "return",
    ):
        """``content_policy``: the config's ``upstream_errors.content_policy`` (return, escalate)."""
        self._models = models
        self._metrics = metrics
        self._review = review
        self._returns_refusals = content_policy == "return"

    def decide(
        self,
        plan: RoutePlan,
        stage: int,
        request: ParsedRequest,
        reply: dict[str, Any],
        scored: StageScore,
        facts: CascadeFacts,
        seconds: float,
        charge: Charge,
    ) -> EscalationReason | None:
        """Decide stage ``stage`` of ``plan``'s route on its answer ``reply`` and its score: None
        keeps it, else why it escalates. ``seconds`` and ``charge``: its call's time and
        charge, kept with the answer for the traffic sampler (with the scorer's calls' USD). An
        answer the review cannot read is the stage's failure (``upstream_error``)."""
        route, policy = plan.route, plan.policy
        assert route is not None and policy is not None
        model, threshold, score = route.models[stage], route.thresholds[stage], scored.score
        if facts.keep_answer is not None:  # asked to: the traffic sampler drew this request
            facts.keep_answer(model, reply, seconds, score, replace(charge, usd=charge.usd + scored.usd))
        self._record_score(plan, model, score, threshold, facts)
        try:  # checking the answer reads it
            reason = self._review.scored(
                model, request, reply, facts, score, threshold, policy.on_missing_score
            )
        except READ_FAILURES as exc:
            return self.unreadable(model, facts, exc)
        if reason is not None and scored.failed and reason.missing_score:  # the scorer's own call failed
            return EscalationReason.SCORER_FAILED
        return reason

    def decide_prefix(
        self, plan: RoutePlan, score: float | None, facts: CascadeFacts
    ) -> EscalationReason | None:
        """Decide a prefix tier's cheap stage on the score of its first tokens (nothing to review
        yet): None commits to it, else why it escalates."""
        route, policy = plan.route, plan.policy
        assert route is not None and policy is not None
        threshold = route.thresholds[0]
        self._record_score(plan, route.models[0], score, threshold, facts)
        if not should_escalate(score, threshold, policy.on_missing_score):
            return None
        return EscalationReason.LOW_SCORE if score is not None else EscalationReason.NO_LOGPROBS

    def _record_score(
        self, plan: RoutePlan, model: str, score: float | None, threshold: float, facts: CascadeFacts
    ) -> None:
        """A scored stage's score and threshold in the facts, the confidence histogram and the
        drift window."""
        facts.score, facts.threshold = score, threshold
        if facts.trace is not None:  # the console is on (gateway.wire.trace)
            facts.trace.scored(model, score, threshold)
        if score is not None:
            assert plan.policy is not None
            self._metrics.child(self._metrics.confidence, plan.tier, model).observe(score)
            self._metrics.drift.observe(plan.policy.policy_id, plan.tier, model, score, plan.kind)

    @staticmethod
    def unreadable(model: str, facts: CascadeFacts, exc: BaseException) -> EscalationReason:
        """A scored stage's answer could not be read (its call is charged): logged, and escalated
        like a malformed answer."""
        unreadable(model, exc)
        facts.failures.append("unreadable")
        return EscalationReason.UPSTREAM_ERROR

    def failed(
        self, model: str, failure: UpstreamFailure, facts: CascadeFacts, timeouts: Timeouts | None
    ) -> Timeouts | None:
        """A scored stage's call to ``model`` failed: its kind in the facts, and a timeout's
        upstream in ``timeouts`` (made at the first). Returns the request's timeouts."""
        facts.failures.append(failure.kind)
        if failure.kind != "timeout":
            return timeouts
        upstream = self._models[model].upstream
        if timeouts is None:
            return Timeouts(failure, upstream)
        timeouts.last = failure
        timeouts.upstreams.add(upstream)
        return timeouts

    def failure_reason(self, model: str, failure: UpstreamFailure, facts: CascadeFacts) -> EscalationReason:
        """Why a stage whose call to ``model`` failed escalates: ``slow_first_token`` for a first
        token later than its model's deadline, ``circuit_open`` for a model its breaker skipped,
        ``content_policy`` for a content-policy refusal the
        config escalates, else ``upstream_error``. A refusal the config returns is raised as the
        client's error instead."""
        if failure.kind == SLOW_FIRST_TOKEN:
            return EscalationReason.SLOW_FIRST_TOKEN
        if failure.kind == EscalationReason.CIRCUIT_OPEN:  # the kind the breaker raises
            return EscalationReason.CIRCUIT_OPEN
        if not failure.content_refusal:
            return EscalationReason.UPSTREAM_ERROR
        if self._returns_refusals:
            self._refusal(facts.tier, model, "returned")
            raise failure.to_gateway_error() from None
        self._refusal(facts.tier, model, "escalated")
        return EscalationReason.CONTENT_POLICY

    def final_failure_returned(
        self, model: str, failure: UpstreamFailure, facts: CascadeFacts, fallback: bool
    ) -> bool:
        """The final stage's call to ``model`` failed: whether its error is the client's answer
        rather than the degraded ``fallback`` (when there is one): with none, or for a
        content-policy refusal the config returns."""
        if not failure.content_refusal:
            return not fallback
        returned = not fallback or self._returns_refusals
        self._refusal(facts.tier, model, "returned" if returned else "degraded")
        return returned

    def _refusal(self, tier: str, model: str, action: str) -> None:
        self._metrics.child(self._metrics.content_refusals, tier, model, action).inc()

    def next_stage(self, models: list[str], stage: int, timeouts: Timeouts | None) -> int | None:
        """The stage after ``stage`` to call: the first whose upstream has not timed out in this
        request; None when no later stage is left."""
        for following in range(stage + 1, len(models)):
            if timeouts is None or self._models[models[following]].upstream not in timeouts.upstreams:
                return following
        return None

    @staticmethod
    def no_stage_left(
        timeouts: Timeouts | None,
        fallback: dict[str, Any] | None,
        fallback_model: str | None,
        policy: Policy,
        facts: CascadeFacts,
    ) -> dict[str, Any]:
        """Every later stage was skipped: the last good answer marked degraded, if the policy allows
        it; else the timeout that made them skippable (a 504)."""
        assert timeouts is not None  # a stage is only skipped after its upstream timed out
        if fallback is not None and policy.allow_degraded:
            facts.outcome, facts.answered_by, facts.degraded = "escalated", fallback_model, True
            return fallback
        raise timeouts.last.to_gateway_error() from None

    def escalate(
        self, tier: str, from_model: str, to_model: str, facts: CascadeFacts, reason: EscalationReason
    ) -> None:
        """Count an escalation and record its reason."""
        facts.escalated = True
        self._metrics.child(self._metrics.escalations, tier, from_model, to_model).inc()
        self._review.escalated(tier, from_model, reason, facts)
