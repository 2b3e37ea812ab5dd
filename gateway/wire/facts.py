"""What happened to one request, as the engine records it and the client reads it.

``CascadeFacts`` is filled by the engine (gateway.engine.cascade) and by the live relay of a streamed final
stage (gateway.streaming.live), and read by the endpoint for the ``x-cascade-*`` headers and the stream's
``cascade`` object; its own module so that the engine and the relay both import it downwards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.wire.exchange import Headers
from gateway.wire.trace import DecisionTrace
from money.charges import Charge
from policies.answer_checks import AnswerProblem

# Keeps one scored stage's answer: (model, upstream body, seconds, score, the stage's charge: its
# call's token counts, and USD with a black-box scorer's own calls).
AnswerKeeper = Callable[[str, dict[str, Any], float, float | None, Charge], None]


@dataclass(slots=True)
class CascadeFacts:
    """What happened to one request: the ``x-cascade-*`` headers and the stream's ``cascade`` object."""

    tier: str
    policy_id: str | None
    models_called: list[str] = field(default_factory=list)
    answered_by: str | None = None
    escalated: bool = False
    score: float | None = None
    threshold: float | None = None
    cost_usd: float = 0.0
    # The part of ``cost_usd`` charged without a reported usage (``Charge.bound``: a worst case or an
    # estimate that errs high, not a bill); ``cost_usd - cost_bound_usd`` is what usage billed.
    cost_bound_usd: float = 0.0
    # Tokens of every call, as charged; unknown when a call had no counts.
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_unknown: bool = False
    upstream_s: float = 0.0
    degraded: bool = False
    outcome: str = "error"
    within_budget: bool = True
    failures: list[str] = field(default_factory=list)
    route: list[str] = field(default_factory=list)
    # The request's kind (policies.tool_calls.request_kind): which section of the policy served it.
    kind: str = "text"
    # Why each escalation happened, in order (gateway.stages.answer_review.EscalationReason).
    escalation_reasons: list[str] = field(default_factory=list)
    # Every answer that failed a structural check: (model, problem), final stage included.
    invalid_answers: list[tuple[str, AnswerProblem]] = field(default_factory=list)
    # The check the returned answer failed (a final stage's answer is returned as it is), if any.
    answer_problem: str | None = None
    # Set only for a request the traffic sampler drew: its scored answers are reused, never re-bought.
    keep_answer: AnswerKeeper | None = None
    # A routed tier's choice (gateway.routing.routed_tiers): the mechanism taken and the router's probability.
    mechanism: str | None = None
    router_probability: float | None = None
    # A streamed request decided by a tier's ``prefix`` rule (gateway.streaming.prefix_commit): the rule and
    # how many content tokens of the cheap stage were held when it was decided (None: the whole answer).
    commit_rule: str | None = None
    commit_tokens: int | None = None
    # A committed stream that broke and was finished by the next stage (gateway.streaming.stream_finish):
    # the model that continued it and the content chunks the broken stream had sent.
    continued_by: str | None = None
    continued_after_tokens: int | None = None
    # The console's record of every call, score and escalation (gateway.wire.trace); None: console off.
    trace: DecisionTrace | None = None

    @property
    def tokens(self) -> int:
        """Tokens of every call so far (prompt + completion, as charged)."""
        return self.prompt_tokens + self.completion_tokens

    def charged(self) -> Charge:
        """Everything charged so far as one charge: its USD and token counts."""
        return Charge(self.cost_usd, self.prompt_tokens, self.completion_tokens)

    def charged_since(self, before: Charge) -> Charge:
        """What was charged since ``charged()`` returned ``before`` (e.g. one stage's call)."""
        return Charge(
            self.cost_usd - before.usd,
            self.prompt_tokens - before.prompt_tokens,
            self.completion_tokens - before.completion_tokens,
        )

    def headers(self, overhead_ms: float) -> Headers:
        """The ``x-cascade-*`` response headers (docs/contracts.md#response-headers)."""
        out = [
            (b"x-cascade-tier", self.tier.encode()),
            (b"x-cascade-policy", (self.policy_id or "none").encode()),
            (b"x-cascade-model", (self.answered_by or "none").encode()),
            (b"x-cascade-models-called", ",".join(self.models_called).encode()),
            (b"x-cascade-escalated", b"true" if self.escalated else b"false"),
            (b"x-cascade-escalation-reason", ",".join(self.escalation_reasons).encode() or b"none"),
            (b"x-cascade-score", _number(self.score)),
            (b"x-cascade-threshold", _number(self.threshold)),
            (b"x-cascade-cost-usd", f"{self.cost_usd:.10g}".encode()),
            # Zero on almost every request (every attempt reported usage): no float to format.
            (
                b"x-cascade-cost-bound-usd",
                f"{self.cost_bound_usd:.10g}".encode() if self.cost_bound_usd else b"0",
            ),
            (b"x-cascade-overhead-ms", f"{overhead_ms:.3f}".encode()),
        ]
        if self.degraded:
            out.append((b"x-cascade-degraded", b"true"))
        if not self.within_budget:
            out.append((b"x-cascade-over-budget", b"true"))
        if self.mechanism is not None:
            out.append((b"x-cascade-mechanism", self.mechanism.encode()))
            out.append((b"x-cascade-router-probability", _number(self.router_probability)))
        if self.commit_rule is not None:
            out.append((b"x-cascade-commit", self.commit_rule.encode()))
            tokens = b"none" if self.commit_tokens is None else str(self.commit_tokens).encode()
            out.append((b"x-cascade-commit-tokens", tokens))
        return out

    def as_dict(self, overhead_ms: float) -> dict[str, Any]:
        """The same facts as a JSON object (final stream chunk, logs)."""
        routed: dict[str, Any] = (
            {"mechanism": self.mechanism, "router_probability": self.router_probability}
            if self.mechanism is not None
            else {}
        )
        if self.commit_rule is not None:
            routed = {**routed, "commit": {"rule": self.commit_rule, "tokens": self.commit_tokens}}
        if self.continued_by is not None:
            routed["continued"] = {"model": self.continued_by, "after_tokens": self.continued_after_tokens}
        return {
            "tier": self.tier,
            "policy": self.policy_id,
            "model": self.answered_by,
            "models_called": self.models_called,
            "escalated": self.escalated,
            "escalation_reasons": self.escalation_reasons,
            "answer_problem": self.answer_problem,
            "score": self.score,
            "threshold": self.threshold,
            "cost_usd": self.cost_usd,
            "cost_bound_usd": self.cost_bound_usd,
            "overhead_ms": round(overhead_ms, 3),
            "degraded": self.degraded,
            **routed,
        }

    def log_fields(
        self,
        worst_case_usd: float | None,
        upstream_s: float,
        log_prompts: bool,
        fields: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The request log line's fields from these facts (an invalid answer's detail quotes the
        answer: only where prompts are logged), added to ``fields`` when given (the line's dict,
        not copied again), else to a new dict; returned."""
        if fields is None:
            fields = {}
        fields["route"] = self.route
        fields["models_called"] = self.models_called
        fields["answered_by"] = self.answered_by
        fields["escalated"] = self.escalated
        fields["score"] = self.score
        fields["threshold"] = self.threshold
        fields["cost_usd"] = self.cost_usd
        fields["cost_bound_usd"] = self.cost_bound_usd
        fields["worst_case_usd"] = worst_case_usd
        fields["upstream_ms"] = round(upstream_s * 1000, 3)
        fields["degraded"] = self.degraded
        fields["policy_id"] = self.policy_id
        if self.mechanism is not None:
            fields.update(mechanism=self.mechanism, router_probability=self.router_probability)
        if self.commit_rule is not None:
            fields.update(commit=self.commit_rule, commit_tokens=self.commit_tokens)
        if self.continued_by is not None:
            fields.update(continued_by=self.continued_by, continued_after_tokens=self.continued_after_tokens)
        if self.failures:
            fields["upstream_failures"] = self.failures
        if self.escalation_reasons:
            fields["escalation_reasons"] = self.escalation_reasons
        if self.invalid_answers:
            # The detail quotes the answer (a value it gave): logged only where prompts are.
            fields["invalid_answers"] = [
                {"model": model, "check": p.kind, **({"detail": p.detail} if log_prompts else {})}
                for model, p in self.invalid_answers
            ]
            fields["answer_problem"] = self.answer_problem
        return fields


def _number(value: float | None) -> bytes:
    return b"none" if value is None else f"{value:.6g}".encode()
