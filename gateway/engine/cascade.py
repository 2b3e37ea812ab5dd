"""The cascade engine: call each stage of a route, score, accept or escalate.

Contracts: docs/contracts.md#scorers, #http-surface and #faults.

A route is a chain ``models[0..k-1]`` with ``thresholds[0..k-2]``. Every stage but the last is
called with ``logprobs: true, top_logprobs: K`` and scored with ``policies.score_response`` (the
function calibration uses); stage i's answer is accepted unless ``should_escalate(score,
thresholds[i])``. The last stage is not scored. A black-box scorer (``verifier``,
``consistency``, ``self_report``) asks no logprobs: its score comes from extra calls, charged like
every call (gateway.stages.blackbox_scoring). Faults:

* a non-final stage fails (timeout, 5xx, refused, malformed JSON, 429 past the deadline):
  escalate to the next stage and count the escalation; a provider's content-policy refusal is
  returned to the client instead unless ``upstream_errors.content_policy`` is ``escalate``
  (gateway.stages.decision);
* after a timeout, every later stage served by the same upstream (``ModelConfig.upstream``: two
  pool members of one llama-server) is skipped: it would wait behind the abandoned call under the
  same deadline. With no stage left: the last good answer (degraded) if allowed, else the 504;
* the final stage fails after an escalation (including a malformed answer: not JSON, ``choices``
  empty or not objects): the last good answer is returned marked ``degraded`` if
  ``policy.allow_degraded``, else the final stage's error (502/504/429);
* an answer without usable logprobs (including pure tool calls, which have no content tokens):
  the policy's ``on_missing_score`` rule.

Every answer is also checked (gateway.stages.answer_review, docs/tool-calls.md): calls a model writes as
content are normalized into ``tool_calls`` (after scoring), a scored stage whose answer fails a
structural check escalates whatever its score, a final stage's invalid answer is returned and
counted; every escalation records its reason. Each scored stage is decided by
gateway.stages.decision (``StageDecision``: the score, the sampler's copy, the review, the reason,
and which stage follows a timeout), the one decision of the buffered and the prefix paths.

A model with a ``first_token_timeout_s`` is called streamed, even where its answer is read whole
(gateway.streaming.first_token): a late first token cancels the stage (``slow_first_token``). A
``fallback`` tier is served by gateway.engine.fallback (no score: the first answer that comes).

A streamed request is served by ``CascadeEngine.stream`` as client-ready SSE events: the scored
stages are the same, an accepted answer is replayed, the final stage is relayed live by
gateway.streaming.live (which charges it however the stream ends). On a tier with the ``prefix`` commit rule
(gateway.streaming.prefix_commit) a streamed text request's cheap stage is itself streamed and decided on its
first tokens by the engine's ``PrefixStage`` (gateway.streaming.prefix_stream): committed to (relayed
live) or cancelled and escalated.

The client's own fields go through unchanged, over the model's configured request defaults
(``policies.request_defaults``); ``model`` is rewritten to the upstream's id, and
``logprobs``/``top_logprobs`` are added on scored stages (gateway.stages.bodies).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from gateway.config.settings import ModelConfig
from gateway.engine.fallback import FallbackStages, fallback_tier
from gateway.routing.tier_choice import RoutePlan
from gateway.stages.answer_review import AnswerReview, EscalationReason
from gateway.stages.blackbox_scoring import StageScorer
from gateway.stages.bodies import client_body, scored_stage_body, stage_body
from gateway.stages.decision import StageDecision, Timeouts
from gateway.stages.outcomes import FinalStage, StreamChunk, StreamEvent, StreamStart
from gateway.streaming.first_token import streamed_answer
from gateway.streaming.live import LiveRelay, WholeAnswer
from gateway.streaming.prefix_commit import prefix_rule
from gateway.streaming.prefix_stream import Committed, PrefixStage
from gateway.streaming.sse import SSE_HEADERS, replay
from gateway.telemetry.metrics import GatewayMetrics
from gateway.upstream.client import UpstreamReply
from gateway.upstream.failure import UpstreamFailure
from gateway.upstream.pool import UpstreamPool
from gateway.wire.answer_reading import READ_FAILURES, reading_answer, unreadable
from gateway.wire.errors import UnreadableAnswerError
from gateway.wire.facts import AnswerKeeper, CascadeFacts
from gateway.wire.requests import ParsedRequest
from money.charges import Attempt, Charge, attempt_charge


@dataclass(slots=True)
class CascadeResult:
    """A complete answer (the upstream's body) and the facts."""

    facts: CascadeFacts
    body: dict[str, Any]


class CascadeEngine:
    """Runs plans against the upstream pool and records metrics of every call.

    ``run`` serves a request as one answer; ``stream`` serves it as client-ready SSE events. Both
    share the scored stages, the degraded-fallback rule (``_fall_back``) and the accounting.
    """

    def __init__(
        self,
        models: Mapping[str, ModelConfig],
        pool: UpstreamPool,
        metrics: GatewayMetrics,
        content_policy: str = "return",
    ):
        """``content_policy``: the config's ``upstream_errors.content_policy`` (gateway.stages.decision)."""
        self._models = models
        self._pool = pool
        self._metrics = metrics
        self._review = AnswerReview(models, metrics)
        self._scorer = StageScorer(models, self._call)
        self._decision = StageDecision(models, metrics, self._review, content_policy)
        self._prefix = PrefixStage(models, pool, metrics, self._decision, self._scorer, self.settle)
        self._fallback = FallbackStages(
            models, pool, self._decision, self._review, self.settle, self.whole_answer, self.live_body
        )

    @staticmethod
    def new_facts(
        plan: RoutePlan,
        keep_answer: AnswerKeeper | None = None,
    ) -> CascadeFacts:
        """Empty facts for ``plan`` (the caller keeps them, so a failed request still reports its calls).

        ``keep_answer``: called with every scored stage's answer and the charge of its call (the
        traffic sampler's ``DrawnRequest.keep``, for a request it drew); None keeps nothing.
        """
        return CascadeFacts(
            plan.tier,
            plan.policy.policy_id if plan.policy else None,
            within_budget=plan.within_budget,
            route=plan.route.models if plan.route is not None else [plan.model or ""],
            keep_answer=keep_answer,
            kind=plan.kind,
            mechanism=plan.mechanism,
            router_probability=plan.router_probability,
        )

    async def run(
        self, plan: RoutePlan, request: ParsedRequest, deadline: float, *, facts: CascadeFacts | None = None
    ) -> CascadeResult:
        """Serve ``plan`` as one complete answer.

        ``facts`` (from ``new_facts``) are filled in as calls are made. Raises GatewayError when no
        answer can be served.
        """
        facts = facts or self.new_facts(plan)
        if fallback_tier(plan):
            stage = await self._fallback.run(plan, request, deadline, facts)
        else:
            stage = await self._scored_stages(plan, request, deadline, facts)
        if isinstance(stage, dict):
            return CascadeResult(facts, stage)
        return CascadeResult(facts, await self._final_answer(stage, request, deadline, facts))

    async def _final_answer(
        self, stage: FinalStage, request: ParsedRequest, deadline: float, facts: CascadeFacts
    ) -> dict[str, Any]:
        """Call the final stage read whole: its (reviewed) answer, or the fallback if it fails."""
        try:
            reply = await self.whole_answer(stage.model, request, deadline, facts)
        except UpstreamFailure as failure:
            return self._fall_back(stage, failure, facts)
        except UnreadableAnswerError as error:  # a streamed answer: the relay listed the failure
            return self._fall_back_unreadable(stage, error, facts, listed=True)
        facts.answered_by = stage.model
        try:
            self._review.final(stage.model, request, reply, facts)
        except READ_FAILURES as exc:
            return self._fall_back_unreadable(stage, unreadable(stage.model, exc), facts)
        return reply

    async def whole_answer(
        self, model: str, request: ParsedRequest, deadline: float, facts: CascadeFacts
    ) -> dict[str, Any]:
        """An unscored stage's whole answer (no logprobs of the scorer's); charged into ``facts``."""
        config = self._models[model]
        body = stage_body(request, config, top_k=None, stream=False)
        streamed = self.live_body(model, request) if config.first_token_timeout_s else None
        reply, _, _ = await self._answer(model, request, body, deadline, facts, streamed)
        return reply

    async def _answer(
        self,
        model: str,
        request: ParsedRequest,
        body: bytes,
        deadline: float,
        facts: CascadeFacts,
        streamed: bytes | None,
    ) -> tuple[dict[str, Any], float, Charge]:
        """One stage's whole answer, its call's seconds and charge: ``body`` sent non-streamed, or
        for a model with a first-token deadline ``streamed`` (the same request, streamed) read
        whole under that deadline (gateway.streaming.first_token: ``SlowFirstToken`` when late)."""
        first_token_s = self._models[model].first_token_timeout_s
        if first_token_s is None or streamed is None:
            reply, charge = await self._call(model, request, body, deadline, facts)
            return reply.body, reply.seconds, charge
        pool, settle = self._pool[model], self.settle
        return await streamed_answer(pool, request, streamed, deadline, facts, settle, first_token_s)

    async def stream(
        self, plan: RoutePlan, request: ParsedRequest, deadline: float, facts: CascadeFacts, started: float
    ) -> AsyncGenerator[StreamEvent, None]:
        """Serve ``plan`` as client-ready events: ``StreamStart``, ``StreamChunk``s, maybe ``StreamFailed``.

        An accepted (or degraded) answer is replayed; the final stage is relayed live and charged
        however it ends (gateway.streaming.live). Raises GatewayError before ``StreamStart`` when nothing can
        be served; after it, failures arrive as a ``StreamFailed`` event. ``started`` is the
        request's ``time.perf_counter()`` start (for the overhead reported in headers and the
        final chunk). Close the iterator (``contextlib.aclosing``) so an abandoned stream is charged.
        """
        rule = prefix_rule(plan)
        stage: Committed | dict[str, Any] | FinalStage
        if rule is not None or fallback_tier(plan):
            if rule is not None:
                stage = await self._prefix.decide(plan, request, deadline, facts, started, rule)
            else:
                stage = await self._fallback.stream(plan, request, deadline, facts, started)
            if isinstance(stage, Committed):  # the stage streams on to its end
                async with aclosing(stage.events):
                    yield stage.start
                    async for event in stage.events:
                        yield event  # type: ignore[misc]  # a committed relay sends no prefix events
                return
        else:
            stage = await self._scored_stages(plan, request, deadline, facts)
        if not isinstance(stage, dict) and self._review.writes_calls(stage.model, request):
            # Calls written as content cannot be normalized token by token: fetch and replay.
            stage = await self._final_answer(stage, request, deadline, facts)
        if isinstance(stage, dict):
            with reading_answer(facts.answered_by):
                events_of_answer = self._replay(stage, facts, request, started)
            for event in events_of_answer:
                yield event
            return
        watch = self._review.watch(stage.model, request, facts)
        first_token_s = self._models[stage.model].first_token_timeout_s
        client = self._pool[stage.model]
        relay = LiveRelay(client, request, facts, self.settle, started, watch, None, first_token_s)
        events = relay.events(self.live_body(stage.model, request), deadline)
        async with aclosing(events):
            try:
                async for live in events:
                    if isinstance(live, WholeAnswer):  # an upstream that ignores ``stream``
                        try:
                            with reading_answer(stage.model):
                                self._review.final(stage.model, request, live.body, facts)
                                replay_events = self._replay(live.body, facts, request, started)
                        except UnreadableAnswerError as error:
                            fallback = self._fall_back_unreadable(stage, error, facts)
                            replay_events = self._replay(fallback, facts, request, started)
                        for replayed in replay_events:
                            yield replayed
                        return
                    yield live  # type: ignore[misc]  # a relay without a gate sends no prefix events
            except UpstreamFailure as failure:  # before the client saw a byte
                fallback = self._fall_back(stage, failure, facts)
                for replayed in self._replay(fallback, facts, request, started):
                    yield replayed

    def live_body(self, model: str, request: ParsedRequest) -> bytes:
        """The upstream body of a final stage relayed live (streamed, no scorer's logprobs)."""
        config = self._models[model]
        return stage_body(request, config, top_k=None, stream=True)

    async def _scored_stages(
        self, plan: RoutePlan, request: ParsedRequest, deadline: float, facts: CascadeFacts
    ) -> dict[str, Any] | FinalStage:
        """Call and score every stage but the last: an accepted answer, or the final stage to call
        (gateway.stages.decision decides each stage and which one follows)."""
        if plan.route is None:  # passthrough
            assert plan.model is not None
            facts.outcome = "passthrough"
            return FinalStage(plan.model)
        policy, models, decision = plan.policy, plan.route.models, self._decision
        assert policy is not None
        fallback: dict[str, Any] | None = None
        fallback_model: str | None = None
        timeouts: Timeouts | None = None  # the upstreams that timed out in this request
        last, stage = len(models) - 1, 0
        while stage < last:
            model = models[stage]
            config = self._models[model]
            body = scored_stage_body(request, config, policy.scorer)
            # A first-token deadline is seen on a stream only: the stage is requested streamed.
            streamed = None
            if config.first_token_timeout_s is not None:
                streamed = scored_stage_body(request, config, policy.scorer, stream=True)
            reply: dict[str, Any] | None = None
            try:
                reply, seconds, charge = await self._answer(model, request, body, deadline, facts, streamed)
            except UpstreamFailure as failure:
                timeouts = decision.failed(model, failure, facts, timeouts)
                reason: EscalationReason | None = decision.failure_reason(model, failure, facts)
            except UnreadableAnswerError:  # a streamed answer (logged and listed by the relay)
                reason = EscalationReason.UPSTREAM_ERROR
            else:
                try:  # scoring reads the answer: one it cannot read is the stage's failure
                    # A black-box scorer's extra calls are charged here; their cost is the stage's too.
                    scored = await self._scorer.score(
                        policy.scorer, model, request, body, reply, deadline, facts
                    )
                except READ_FAILURES as exc:
                    reason = decision.unreadable(model, facts, exc)
                else:
                    reason = decision.decide(plan, stage, request, reply, scored, facts, seconds, charge)
            if reason is None:
                assert reply is not None
                facts.answered_by = model
                facts.outcome = "accepted" if stage == 0 else "escalated"
                return reply
            if reason.keeps_fallback:  # a certainly wrong (or unread) answer is no fallback
                fallback, fallback_model = reply, model
            following = decision.next_stage(models, stage, timeouts)
            if following is None:  # every later stage waits on an upstream that timed out
                return decision.no_stage_left(timeouts, fallback, fallback_model, policy, facts)
            decision.escalate(plan.tier, model, models[following], facts, reason)
            stage = following
        facts.outcome = "direct" if last == 0 else "escalated"
        if not policy.allow_degraded:
            fallback = fallback_model = None
        return FinalStage(models[last], fallback, fallback_model)

    def _fall_back(self, stage: FinalStage, failure: UpstreamFailure, facts: CascadeFacts) -> dict[str, Any]:
        """The final stage failed: the last good answer marked degraded, if allowed; else the error
        (also for a content-policy refusal the config returns)."""
        facts.failures.append(failure.kind)
        fallback = stage.fallback is not None
        if self._decision.final_failure_returned(stage.model, failure, facts, fallback):
            raise failure.to_gateway_error() from None
        assert stage.fallback is not None
        facts.answered_by, facts.degraded = stage.fallback_model, True
        return stage.fallback

    @staticmethod
    def _fall_back_unreadable(
        stage: FinalStage, error: UnreadableAnswerError, facts: CascadeFacts, *, listed: bool = False
    ) -> dict[str, Any]:
        """The final stage's answer cannot be read (its call is charged): the last good answer
        marked degraded, if allowed; else the 502. ``listed``: already in the facts' failures."""
        if not listed:
            facts.failures.append("unreadable")
        if stage.fallback is None:
            raise error
        facts.answered_by, facts.degraded = stage.fallback_model, True
        return stage.fallback

    @staticmethod
    def _replay(
        body: dict[str, Any], facts: CascadeFacts, request: ParsedRequest, started: float
    ) -> tuple[StreamStart, StreamChunk]:
        """A complete answer as the events of an equivalent stream."""
        shaped = client_body(body, facts.answered_by or "", request)
        overhead_ms = (time.perf_counter() - started - facts.upstream_s) * 1000
        return (
            StreamStart([*SSE_HEADERS, *facts.headers(overhead_ms)]),
            StreamChunk(replay(shaped, request, facts.as_dict(overhead_ms)), last=True),
        )

    async def _call(
        self, model: str, request: ParsedRequest, body: bytes, deadline: float, facts: CascadeFacts
    ) -> tuple[UpstreamReply, Charge]:
        """One non-streamed call, listed in ``models_called`` and charged into ``facts``: the reply
        and its charge. Every attempt it made is charged however the call ends (an answer, a
        failure, a cancellation: ``settle``)."""
        facts.models_called.append(model)
        attempts: list[Attempt] = []
        try:
            reply = await self._pool[model].complete(request.api, body, deadline, attempts)
        except UpstreamFailure as failure:
            if failure.kind == "circuit_open":  # skipped, never called
                facts.models_called.pop()
            raise
        finally:
            charge = self.settle(facts, model, attempts)
        facts.upstream_s += reply.seconds
        return reply, charge

    def settle(self, facts: CascadeFacts, model: str, attempts: list[Attempt]) -> Charge:
        """Charge every attempt of one call to ``model`` (``money.charges.attempt_charge``: its
        usage, else its worst case; nothing for one that provably was not served) into the facts
        and the metrics: the one settlement of every upstream call of a request. Returns the sum."""
        config = self._models[model]
        charges = [
            attempt_charge(config.price, attempt, config.limits) for attempt in attempts if attempt.billable
        ]
        for charge in charges:
            self.record(facts, model, charge)
        if facts.trace is not None:  # the console is on (gateway.wire.trace)
            facts.trace.call(model, len(attempts), charges)
        if len(charges) == 1:  # the common case: one attempt, answered
            return charges[0]
        return Charge(
            sum(c.usd for c in charges),
            sum(c.prompt_tokens for c in charges),
            sum(c.completion_tokens for c in charges),
        )

    def record(self, facts: CascadeFacts, model: str, charge: Charge) -> None:
        """Add one charge to the facts and the metrics."""
        facts.cost_usd += charge.usd
        if charge.bound:  # no bill was read: the part of the cost that is a bound (docs/contracts.md)
            facts.cost_bound_usd += charge.usd
        facts.prompt_tokens += charge.prompt_tokens
        facts.completion_tokens += charge.completion_tokens
        if not (charge.prompt_tokens or charge.completion_tokens):
            facts.tokens_unknown = True  # charged without counts: rate limits keep the reserved tokens
        metrics = self._metrics
        metrics.child(metrics.cost, facts.tier, model).inc(charge.usd)
        if charge.prompt_tokens:
            metrics.child(metrics.tokens, model, "prompt").inc(charge.prompt_tokens)
        if charge.completion_tokens:
            metrics.child(metrics.tokens, model, "completion").inc(charge.completion_tokens)
