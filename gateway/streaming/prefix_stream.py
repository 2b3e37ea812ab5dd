"""The cheap stage of a ``prefix`` tier, streamed and decided on its first tokens
(gateway.streaming.prefix_commit).

The cascade engine (gateway.engine.cascade) holds one ``PrefixStage`` and asks it to ``decide`` a
streamed request of such a tier: the cheap stage is relayed by ``gateway.streaming.live.LiveRelay``
with a ``PrefixGate``; at the gate's decision point the held tokens are scored and decided
(``gateway.stages.decision.StageDecision.decide_prefix``: score, threshold, commit position,
escalation and its reason, the cancelled tokens). Committed to, the engine streams the rest of the
relay (``Committed``; a committed stream that breaks is finished by the final stage where its model
can continue it: gateway.streaming.stream_finish); rejected, the call is cancelled and charged by
the relay, however it ends, and the final stage streams live. An answer that ends before the
decision point is decided as under ``buffer``, by the same decision as the engine's buffered stages.
A failure before the first byte escalates as under ``buffer`` (``upstream_error``, or
``slow_first_token`` past the model's first-token deadline; a timeout skips a final stage on the
same upstream: ``StageDecision.next_stage``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.config.settings import ModelConfig
from gateway.routing.tier_choice import RoutePlan
from gateway.stages.answer_review import EscalationReason
from gateway.stages.blackbox_scoring import StageScorer
from gateway.stages.bodies import upstream_body
from gateway.stages.decision import StageDecision
from gateway.stages.outcomes import FinalStage, StreamStart
from gateway.streaming.live import (
    Decide,
    LiveRelay,
    PrefixRejected,
    RelayEvent,
    ShortAnswer,
    WholeAnswer,
)
from gateway.streaming.live_charge import Settle
from gateway.streaming.prefix_commit import PrefixGate
from gateway.streaming.stream_finish import StreamFinish
from gateway.telemetry.metrics import GatewayMetrics
from gateway.upstream.failure import UpstreamFailure
from gateway.upstream.pool import UpstreamPool
from gateway.wire.answer_reading import READ_FAILURES
from gateway.wire.errors import UnreadableAnswerError
from gateway.wire.facts import CascadeFacts
from gateway.wire.requests import ParsedRequest
from policies.commit import CommitRule


@dataclass(slots=True, frozen=True)
class Committed:
    """The cheap stage was committed to: the response's start and the rest of its live relay (the
    caller streams and closes it, ``contextlib.aclosing``, so an abandoned stream is charged)."""

    start: StreamStart
    events: AsyncGenerator[RelayEvent, None]  # only client events: the prefix was decided once


class PrefixStage:
    """A ``prefix`` tier's cheap stage, streamed and decided (see the module docstring)."""

    def __init__(
        self,
        models: Mapping[str, ModelConfig],
        pool: UpstreamPool,
        metrics: GatewayMetrics,
        decision: StageDecision,
        scorer: StageScorer,
        settle: Settle,
    ):
        """The engine's models, pool, metrics, stage decision, scorer and settlement."""
        self._models = models
        self._pool = pool
        self._metrics = metrics
        self._decision = decision
        self._scorer = scorer
        self._settle = settle

    async def decide(
        self,
        plan: RoutePlan,
        request: ParsedRequest,
        deadline: float,
        facts: CascadeFacts,
        started: float,
        rule: CommitRule,
    ) -> Committed | dict[str, Any] | FinalStage:
        """Stream the cheap stage up to its decision: committed to (``Committed``), a whole answer
        accepted as under ``buffer``, or the final stage to stream. Raises GatewayError when the
        cheap stage timed out and the final stage would queue behind it on the same upstream."""
        assert plan.route is not None and plan.policy is not None
        cheap, final = plan.route.models
        config = self._models[cheap]
        body = upstream_body(
            request,
            config.model,
            top_k=plan.policy.scorer.top_k,
            stream=True,
            defaults=config.request_defaults,
            capabilities=config.capabilities,
            default_cap=config.default_max_tokens,
        )
        facts.commit_rule = "prefix"
        gate = PrefixGate(rule, legacy=request.api != "chat")
        decide = self._decider(plan, facts)
        # A request the traffic sampler drew keeps the committed stream's whole answer.
        kept = KeptStream(cheap, request, facts) if facts.keep_answer is not None else None
        first_token_s = config.first_token_timeout_s
        finish = self._finish(cheap, final, request, facts)
        relay = LiveRelay(
            self._pool[cheap],
            request,
            facts,
            self._settle,
            started,
            kept,
            (gate, decide),
            first_token_s,
            finish,
        )
        events = relay.events(body, deadline)
        try:
            first = await anext(events)
        except (UpstreamFailure, UnreadableAnswerError) as failure:  # before the first byte
            return self._failed(plan, failure, facts)
        if isinstance(first, StreamStart):
            return Committed(first, events)
        # The relay ends right after a rejected prefix or a whole answer: read it to its end, so that
        # its upstream call ends as answered (2xx), not as abandoned.
        async for _ in events:
            pass
        if isinstance(first, WholeAnswer | ShortAnswer):
            return await self._decide_whole(plan, request, body, first, deadline, facts)
        assert isinstance(first, PrefixRejected)
        return FinalStage(final)

    def _finish(
        self, cheap: str, final: str, request: ParsedRequest, facts: CascadeFacts
    ) -> StreamFinish | None:
        """What finishes the committed stream if it breaks: the final stage, when its model declares
        it continues an assistant message (``capabilities.continue_assistant``) and the request is a
        chat one (Responses and Messages are served as chat); None: a break is the error event."""
        final_config = self._models[final]
        if not final_config.capabilities.continue_assistant or request.api != "chat":
            return None
        return StreamFinish(
            self._models[cheap], final_config, self._pool[final], request, facts, self._settle
        )

    def _decider(self, plan: RoutePlan, facts: CascadeFacts) -> Decide:
        """The gate's decision on the held prefix: True commits to the stage (the ``Decide`` of
        gateway.streaming.live)."""
        assert plan.route is not None and plan.policy is not None
        (cheap, final), spec, metrics = plan.route.models, plan.policy.scorer, self._metrics

        def decide(gate: PrefixGate) -> bool:
            reason = self._decision.decide_prefix(plan, gate.score(spec), facts)
            facts.commit_tokens = gate.tokens
            metrics.child(metrics.commit_position, plan.tier).observe(gate.tokens)
            if reason is None:
                facts.outcome = "accepted"
                return True
            facts.outcome = "escalated"
            self._decision.escalate(plan.tier, cheap, final, facts, reason)
            metrics.child(metrics.cancelled_tokens, plan.tier, cheap).inc(gate.tokens)
            return False

        return decide

    def _failed(
        self, plan: RoutePlan, failure: UpstreamFailure | UnreadableAnswerError, facts: CascadeFacts
    ) -> FinalStage:
        """The cheap stage failed before the first byte (an unreadable answer is already in the
        facts' failures): escalate, unless a timeout leaves no stage (the final stage's upstream
        timed out): then its 504; a content-policy refusal the config returns is the client's error."""
        assert plan.route is not None and plan.policy is not None
        models = plan.route.models
        decision = self._decision
        timeouts, reason = None, EscalationReason.UPSTREAM_ERROR
        if isinstance(failure, UpstreamFailure):
            timeouts = decision.failed(models[0], failure, facts, None)
            reason = decision.failure_reason(models[0], failure, facts)  # a refusal may be returned
        if decision.next_stage(models, 0, timeouts) is None:  # the final stage would queue behind it
            decision.no_stage_left(timeouts, None, None, plan.policy, facts)
        facts.outcome = "escalated"
        decision.escalate(plan.tier, models[0], models[1], facts, reason)
        return FinalStage(models[1])

    async def _decide_whole(
        self,
        plan: RoutePlan,
        request: ParsedRequest,
        sent: bytes,
        answer: WholeAnswer | ShortAnswer,
        deadline: float,
        facts: CascadeFacts,
    ) -> dict[str, Any] | FinalStage:
        """A cheap answer that ended before the decision point, decided as under ``buffer`` (scored,
        checked, kept for the traffic sampler): the answer, or the final stage to stream."""
        policy, route = plan.policy, plan.route
        assert policy is not None and route is not None
        (cheap, final), reply, decision = route.models, answer.body, self._decision
        facts.outcome = "escalated"
        try:  # scoring reads the answer: one it cannot read is the stage's failure
            scored = await self._scorer.score(policy.scorer, cheap, request, sent, reply, deadline, facts)
        except READ_FAILURES as exc:
            reason: EscalationReason | None = decision.unreadable(cheap, facts, exc)
        else:
            reason = decision.decide(plan, 0, request, reply, scored, facts, answer.seconds, answer.charge)
        if reason is None:
            facts.answered_by, facts.outcome = cheap, "accepted"
            return reply
        decision.escalate(plan.tier, cheap, final, facts, reason)
        if reason.keeps_fallback and policy.allow_degraded:
            return FinalStage(final, reply, cheap)
        return FinalStage(final)


class KeptStream:
    """A drawn request's committed cheap stream, assembled for the traffic sampler as the whole
    answer it was (its text, every logprob entry, its finish reason and usage) and kept, when it
    ran to its end, with the score its prefix was committed on and its call's time and charge: the
    sampler reuses it instead of calling the cheap model again (docs/traffic.md). It sees each
    upstream chunk before the chunk is made the client's (the relay's ``watch``). A rejected prefix
    keeps nothing: its answer was never generated whole."""

    __slots__ = (
        "_before",
        "_copy",
        "_facts",
        "_finish",
        "_legacy",
        "_logprobs",
        "_model",
        "_seconds",
        "_text",
        "_usage",
    )

    def __init__(self, model: str, request: ParsedRequest, facts: CascadeFacts):
        self._model = model
        self._facts = facts
        self._legacy = request.api != "chat"
        # The client's chunks have their alternatives trimmed in place when it asked for logprobs.
        self._copy = request.wants_logprobs
        self._text: list[str] = []
        # Chat: the ``logprobs.content`` entries; legacy: its parallel lists, concatenated.
        self._logprobs: dict[str, list[Any]] = (
            {"tokens": [], "token_logprobs": [], "top_logprobs": []} if self._legacy else {"content": []}
        )
        self._finish: Any = None
        self._usage: dict[str, Any] | None = None
        self._before, self._seconds = facts.charged(), facts.upstream_s  # before the stage's call

    def observe(self, event: dict[str, Any]) -> None:
        """One upstream chunk: its first choice's text, logprobs and finish reason, its usage."""
        usage = event.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        for choice in event.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # one answer per cascade request (n > 1 is refused)
            part = choice if self._legacy else choice.get("delta")
            text = part.get("text" if self._legacy else "content") if isinstance(part, dict) else None
            if isinstance(text, str):
                self._text.append(text)
            logprobs = choice.get("logprobs")
            if isinstance(logprobs, dict):
                for key, kept in self._logprobs.items():
                    found = logprobs.get(key)
                    if isinstance(found, list):
                        copies = self._copy and key == "content"
                        kept.extend(
                            [dict(e) if isinstance(e, dict) else e for e in found] if copies else found
                        )
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]

    def close(self) -> None:
        """The stream ran to its end (and is charged): keep its answer for the sampler."""
        text = "".join(self._text)
        choice: dict[str, Any] = {"index": 0, "finish_reason": self._finish, "logprobs": self._logprobs}
        choice.update({"text": text} if self._legacy else {"message": {"role": "assistant", "content": text}})
        body: dict[str, Any] = {"choices": [choice]}
        if self._usage is not None:
            body["usage"] = self._usage
        facts = self._facts
        assert facts.keep_answer is not None
        # The stage's call is the only one made since this began: the facts' growth is its time and charge.
        seconds, charge = facts.upstream_s - self._seconds, facts.charged_since(self._before)
        facts.keep_answer(self._model, body, seconds, facts.score, charge)
