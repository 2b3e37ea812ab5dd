"""The cheap stage of a ``prefix`` tier, streamed and decided on its first tokens
(gateway.streaming.prefix_commit).

``PrefixStages`` is the part of the cascade engine (gateway.engine.cascade) that serves it: the cheap stage
is relayed by ``gateway.streaming.live.LiveRelay`` with a ``PrefixGate``; the engine's ``decide`` scores the
held tokens and records the decision (score, threshold, commit position, escalation and its reason,
the cancelled tokens); a rejected prefix's call is cancelled and charged by the relay, however it
ends, and the final stage streams live. A failure before the first byte escalates as under
``buffer`` (``upstream_error``; a timeout skips a final stage on the same upstream).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from typing import Any

from gateway.config.settings import ModelConfig
from gateway.routing.tier_choice import RoutePlan
from gateway.stages.answer_review import AnswerReview
from gateway.stages.bodies import upstream_body
from gateway.stages.outcomes import FinalStage, StreamEvent
from gateway.streaming.live import LiveRelay, PrefixRejected, Settle, ShortAnswer, WholeAnswer
from gateway.streaming.prefix_commit import PrefixGate
from gateway.telemetry.metrics import GatewayMetrics
from gateway.upstream.client import UpstreamFailure, UpstreamPool
from gateway.wire.answer_reading import READ_FAILURES
from gateway.wire.errors import UnreadableAnswerError
from gateway.wire.facts import CascadeFacts
from gateway.wire.requests import ParsedRequest
from policies import score_response, should_escalate
from policies.commit import CommitRule


class PrefixStages:
    """The engine's ``prefix`` path; the engine provides the attributes and methods declared here."""

    _models: Mapping[str, ModelConfig]
    _pool: UpstreamPool
    _metrics: GatewayMetrics
    _review: AnswerReview
    settle: Settle

    def _escalate(self, tier: str, from_model: str, to_model: str, facts: CascadeFacts, reason: str) -> None:
        raise NotImplementedError

    def _unreadable_stage(
        self, tier: str, model: str, next_model: str, facts: CascadeFacts, exc: BaseException
    ) -> None:
        raise NotImplementedError

    def _observe_score(self, plan: RoutePlan, model: str, score: float | None) -> None:
        raise NotImplementedError

    async def _prefix_stage(
        self,
        plan: RoutePlan,
        request: ParsedRequest,
        deadline: float,
        facts: CascadeFacts,
        started: float,
        rule: CommitRule,
        decided: list[dict[str, Any] | FinalStage],
    ) -> AsyncGenerator[StreamEvent, None]:
        """The cheap stage of a ``prefix`` tier, streamed (gateway.streaming.prefix_commit): the events of a
        committed stream, or nothing and what to serve instead put in ``decided`` (the final stage
        to stream, or a whole answer accepted as under ``buffer``)."""
        policy, route = plan.policy, plan.route
        assert policy is not None and route is not None
        (cheap, final), threshold, spec = route.models, route.thresholds[0], policy.scorer
        config = self._models[cheap]
        body = upstream_body(
            request,
            config.model,
            top_k=spec.top_k,
            stream=True,
            defaults=config.request_defaults,
            capabilities=config.capabilities,
            default_cap=config.default_max_tokens,
        )
        facts.commit_rule = "prefix"
        metrics = self._metrics

        def decide(gate: PrefixGate) -> bool:
            score = gate.score(spec)
            facts.score, facts.threshold, facts.commit_tokens = score, threshold, gate.tokens
            self._observe_score(plan, cheap, score)
            metrics.child(metrics.commit_position, plan.tier).observe(gate.tokens)
            if not should_escalate(score, threshold, policy.on_missing_score):
                facts.outcome = "accepted"
                return True
            facts.outcome = "escalated"
            reason = "low_score" if score is not None else "no_logprobs"
            self._escalate(plan.tier, cheap, final, facts, reason)
            metrics.child(metrics.cancelled_tokens, plan.tier, cheap).inc(gate.tokens)
            return False

        gate = PrefixGate(rule, legacy=request.api != "chat")
        relay = LiveRelay(self._pool[cheap], request, facts, self.settle, started, None, (gate, decide))
        events = relay.events(body, deadline)
        async with aclosing(events):
            try:
                # The relay ends right after a rejected prefix or a whole answer: read it to its end,
                # so that its upstream call ends as answered (2xx), not as abandoned.
                async for live in events:
                    if isinstance(live, PrefixRejected):
                        decided.append(FinalStage(final))
                    elif isinstance(live, WholeAnswer | ShortAnswer):
                        decided.append(self._decide_whole(plan, request, live.body, facts))
                    else:
                        yield live
            except (UpstreamFailure, UnreadableAnswerError) as failure:  # before the first byte
                if isinstance(failure, UpstreamFailure):
                    facts.failures.append(failure.kind)
                    if failure.kind == "timeout" and self._models[final].upstream == config.upstream:
                        raise failure.to_gateway_error() from None  # the final stage would queue behind it
                facts.outcome = "escalated"
                self._escalate(plan.tier, cheap, final, facts, "upstream_error")
                decided.append(FinalStage(final))

    def _decide_whole(
        self, plan: RoutePlan, request: ParsedRequest, reply: dict[str, Any], facts: CascadeFacts
    ) -> dict[str, Any] | FinalStage:
        """A prefix tier's cheap answer that ended before the decision point, decided as under
        ``buffer`` (its whole answer scored and checked): the answer, or the final stage to stream."""
        policy, route = plan.policy, plan.route
        assert policy is not None and route is not None
        (cheap, final), threshold, spec = route.models, route.thresholds[0], policy.scorer
        score = score_response(reply, spec.name, spec.top_k, spec.tokens)
        facts.score, facts.threshold = score, threshold
        self._observe_score(plan, cheap, score)
        facts.outcome = "escalated"
        try:
            reason, problem = self._review.scored(
                cheap, request, reply, facts, score, threshold, policy.on_missing_score
            )
        except READ_FAILURES as exc:
            self._unreadable_stage(plan.tier, cheap, final, facts, exc)
            return FinalStage(final)
        if reason is None:
            facts.answered_by, facts.outcome = cheap, "accepted"
            return reply
        self._escalate(plan.tier, cheap, final, facts, reason)
        if problem is None and policy.allow_degraded:
            return FinalStage(final, reply, cheap)
        return FinalStage(final)
