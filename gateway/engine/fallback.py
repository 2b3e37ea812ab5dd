"""A ``fallback`` tier: serve the first model that answers, go on to the next only on failure.

Contracts: docs/contracts.md#policy-file (``mechanism: fallback``) and #faults.

A tier whose ``mechanism`` is ``fallback`` (policies.schema.Tier) is not scored: its route's models
are called in order, without logprobs, and the first answer that comes is served, whatever it
says (reviewed and reported as a final stage's, gateway.stages.answer_review). The next model is
called only when a call fails: an error after its retries, a timeout, a late first token (the
model's ``first_token_timeout_s``, ``slow_first_token``) or an answer that cannot be read. Each
failover is counted and reported as an escalation with its reason. After a timeout, a later model
on the same upstream is skipped, as in a cascade (gateway.stages.decision). A streamed request is
relayed live from the first model: it fails over only before the client's first byte (after it, a
failure ends the stream with an error event, as every live stage does).

``FallbackStages`` decides every stage but the last; the engine (gateway.engine.cascade) calls the
last as a cascade's final stage, without a degraded answer to fall back to.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextlib import aclosing
from typing import Any, TypeVar

from gateway.config.settings import ModelConfig
from gateway.routing.tier_choice import RoutePlan
from gateway.stages.answer_review import AnswerReview, EscalationReason
from gateway.stages.decision import StageDecision, Timeouts
from gateway.stages.outcomes import FinalStage, StreamStart
from gateway.streaming.live import LiveRelay, WholeAnswer
from gateway.streaming.live_charge import Settle
from gateway.streaming.prefix_stream import Committed
from gateway.upstream.failure import UpstreamFailure
from gateway.upstream.pool import UpstreamPool
from gateway.wire.answer_reading import READ_FAILURES, unreadable
from gateway.wire.errors import UnreadableAnswerError
from gateway.wire.facts import CascadeFacts
from gateway.wire.requests import ParsedRequest

# The engine's whole answer of an unscored stage: (model, request, deadline, facts) -> its body.
WholeAnswerCall = Callable[[str, ParsedRequest, float, CascadeFacts], Awaitable[dict[str, Any]]]
# The engine's upstream body of a live stage: (model, request) -> bytes.
LiveBody = Callable[[str, ParsedRequest], bytes]
# What a stage served: a whole answer (``run``) or a live stage's start or answer (``stream``).
Served = TypeVar("Served")


def fallback_tier(plan: RoutePlan) -> bool:
    """Whether ``plan`` serves a tier of mechanism ``fallback`` (a dict lookup per request)."""
    policy = plan.policy
    if policy is None or plan.route is None:
        return False
    tier = policy.tiers.get(plan.tier)
    return tier is not None and tier.mechanism == "fallback"


class FallbackStages:
    """The stages of a ``fallback`` tier before its last (see the module docstring)."""

    def __init__(
        self,
        models: Mapping[str, ModelConfig],
        pool: UpstreamPool,
        decision: StageDecision,
        review: AnswerReview,
        settle: Settle,
        whole_answer: WholeAnswerCall,
        live_body: LiveBody,
    ):
        """The engine's models, pool, stage decision, answer review and settlement, and its whole
        answer and live body of an unscored stage."""
        self._models = models
        self._pool = pool
        self._decision = decision
        self._review = review
        self._settle = settle
        self._whole_answer = whole_answer
        self._live_body = live_body

    async def run(
        self, plan: RoutePlan, request: ParsedRequest, deadline: float, facts: CascadeFacts
    ) -> dict[str, Any] | FinalStage:
        """Serve as one answer: the first stage's answer that came, or the last stage to call."""

        async def answer(model: str) -> dict[str, Any]:
            reply = await self._whole_answer(model, request, deadline, facts)
            self._reviewed(model, request, reply, facts)
            return reply

        return await self._first_served(plan, facts, answer)

    async def stream(
        self, plan: RoutePlan, request: ParsedRequest, deadline: float, facts: CascadeFacts, started: float
    ) -> Committed | dict[str, Any] | FinalStage:
        """Serve streamed: the live stage that started (``Committed``: its response's start and the
        rest of its relay), a whole answer to replay, or the last stage to stream."""
        return await self._first_served(
            plan, facts, lambda model: self._live(model, request, deadline, facts, started)
        )

    async def _first_served(
        self, plan: RoutePlan, facts: CascadeFacts, serve: Callable[[str], Awaitable[Served]]
    ) -> Served | FinalStage:
        """``serve`` each stage but the last in turn until one serves (its failure fails over to the
        next); else the last stage, for the caller to call."""
        assert plan.route is not None
        models, stage, timeouts = plan.route.models, 0, None
        facts.outcome = "direct" if len(models) == 1 else "escalated"
        while stage < len(models) - 1:
            model = models[stage]
            try:
                served = await serve(model)
            except (UpstreamFailure, UnreadableAnswerError) as failure:
                timeouts, stage = self._fail_over(plan, stage, failure, facts, timeouts)
                continue
            facts.answered_by, facts.outcome = model, "accepted" if stage == 0 else "escalated"
            return served
        return FinalStage(models[-1])

    async def _live(
        self, model: str, request: ParsedRequest, deadline: float, facts: CascadeFacts, started: float
    ) -> Committed | dict[str, Any]:
        """One stage relayed live up to its start (``Committed``), or read whole (an upstream that
        ignored ``stream``; a model writing calls as content). Raises its failure before the start."""
        if self._review.writes_calls(model, request):  # calls written as content: read whole, replayed
            reply = await self._whole_answer(model, request, deadline, facts)
            self._reviewed(model, request, reply, facts)
            return reply
        watch = self._review.watch(model, request, facts)
        first_token_s = self._models[model].first_token_timeout_s
        relay = LiveRelay(
            self._pool[model], request, facts, self._settle, started, watch, None, first_token_s
        )
        events = relay.events(self._live_body(model, request), deadline)
        first = await anext(events)
        if isinstance(first, StreamStart):
            return Committed(first, events)
        async with aclosing(events):  # it ends right after a whole answer: read to its end
            async for _ in events:
                pass
        assert isinstance(first, WholeAnswer)
        self._reviewed(model, request, first.body, facts)
        return first.body

    def _reviewed(
        self, model: str, request: ParsedRequest, reply: dict[str, Any], facts: CascadeFacts
    ) -> None:
        """Review an answer as a final stage's (returned as it is); one it cannot read is a failure."""
        try:
            self._review.final(model, request, reply, facts)
        except READ_FAILURES as exc:
            facts.failures.append("unreadable")
            raise unreadable(model, exc) from exc

    def _fail_over(
        self,
        plan: RoutePlan,
        stage: int,
        failure: UpstreamFailure | UnreadableAnswerError,
        facts: CascadeFacts,
        timeouts: Timeouts | None,
    ) -> tuple[Timeouts | None, int]:
        """Stage ``stage`` failed: counted as an escalation to the next stage to call, with its
        reason; the request's timeouts and that stage. Raises the timeout's error when every later
        stage waits on an upstream that timed out."""
        assert plan.route is not None and plan.policy is not None
        models, decision = plan.route.models, self._decision
        reason = EscalationReason.UPSTREAM_ERROR  # an unreadable answer (already in the failures)
        if isinstance(failure, UpstreamFailure):
            timeouts = decision.failed(models[stage], failure, facts, timeouts)
            reason = decision.failure_reason(models[stage], failure, facts)  # a refusal may be returned
        following = decision.next_stage(models, stage, timeouts)
        if following is None:
            decision.no_stage_left(timeouts, None, None, plan.policy, facts)
        assert following is not None  # no_stage_left raised otherwise
        decision.escalate(plan.tier, models[stage], models[following], facts, reason)
        return timeouts, following
