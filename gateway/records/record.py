"""One request's decision record: what the gateway decided and why, as the console shows it.

``decision_record`` builds it once the request is answered and settled (gateway.api.endpoint), from
facts the gateway computed anyway: the ``CascadeFacts`` behind the ``x-cascade-*`` headers, the
console's ``DecisionTrace`` of each call, score and escalation (gateway.wire.trace), the charge, the
headers the client was sent. The record is a JSON-ready dict; its fields are docs/contracts.md#console.
No text of the request or the answer is in it unless the operator opted in (``console.record_bodies``),
and then only redacted (``redaction.Redactor``) and cut at ``console.body_chars``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.wire.errors import GatewayError
from gateway.wire.exchange import Headers
from gateway.wire.facts import CascadeFacts
from gateway.wire.requests import ParsedRequest
from gateway.wire.trace import CallNote, DecisionTrace
from redaction import Redactor

# The reason of a request that neither escalated nor failed.
NO_REASON = "none"


@dataclass(slots=True)
class ServedRequest:
    """What the endpoint knows of one request once it is settled (the record's input)."""

    request_id: str
    api: str
    path: str
    status: int
    tier: str
    kind: str
    outcome: str
    key_id: str | None
    duration_s: float
    facts: CascadeFacts | None
    parsed: ParsedRequest | None
    error: GatewayError | None
    headers: Headers
    worst_case_usd: float | None
    first_byte_s: float | None
    answer: bytes | None = None


@dataclass(frozen=True, slots=True)
class BodyPolicy:
    """Whether bodies are kept, how long, and the redaction they go through."""

    keep: bool
    chars: int
    redact: Redactor


def request_reason(served: ServedRequest) -> str:
    """Why the request ended as it did: its escalation reasons (comma-separated), the error's code
    for a refused or failed request, else ``none``."""
    facts, error = served.facts, served.error
    if error is not None:
        return str(error.code or error.type)
    if served.status >= 400:
        return "client_closed" if served.status == 499 else f"status_{served.status}"
    if facts is not None and facts.escalation_reasons:
        return ",".join(str(reason) for reason in facts.escalation_reasons)
    return NO_REASON


def decision_record(served: ServedRequest, bodies: BodyPolicy) -> dict[str, Any]:
    """The record of ``served`` (see the module docstring)."""
    facts, parsed = served.facts, served.parsed
    record: dict[str, Any] = {
        "id": served.request_id,
        "time": round(time.time() - served.duration_s, 3),
        "api": served.api,
        "path": served.path,
        "status": served.status,
        "tier": served.tier,
        "kind": served.kind,
        "key_id": served.key_id,
        "outcome": served.outcome,
        "reason": request_reason(served),
        "duration_ms": round(served.duration_s * 1000, 3),
        "first_byte_ms": round(served.first_byte_s * 1000, 3) if served.first_byte_s is not None else None,
        "model_requested": parsed.model[:100] if parsed is not None else None,
        "stream": parsed.stream if parsed is not None else None,
        "headers": [[name.decode("latin-1"), value.decode("latin-1")] for name, value in served.headers],
    }
    if served.error is not None:
        error = served.error
        record["error"] = {
            "status": error.status,
            "type": error.type,
            "code": error.code,
            "message": bodies.redact(error.message)[:500],
        }
    if facts is not None:
        record.update(_facts_fields(facts, served))
    if bodies.keep:
        record["request_body"] = _body(parsed.body if parsed is not None else None, bodies)
        record["answer_body"] = _body(served.answer, bodies) if served.answer is not None else None
    return record


def _facts_fields(facts: CascadeFacts, served: ServedRequest) -> dict[str, Any]:
    """The cascade's part of the record: the decision, the stages, the failures, the charge."""
    fields: dict[str, Any] = {
        "policy_id": facts.policy_id,
        "mechanism": facts.mechanism or ("cascade" if len(facts.route) > 1 else "direct"),
        "router_probability": facts.router_probability,
        "route": facts.route,
        "answered_by": facts.answered_by,
        "escalated": facts.escalated,
        "escalation_reasons": [str(reason) for reason in facts.escalation_reasons],
        "degraded": facts.degraded,
        "within_budget": facts.within_budget,
        "answer_problem": facts.answer_problem,
        "failures": list(facts.failures),
        "score": facts.score,
        "threshold": facts.threshold,
        "charge": {
            "cost_usd": facts.cost_usd,
            "bound_usd": facts.cost_bound_usd,
            "billed_usd": facts.cost_usd - facts.cost_bound_usd,
            "reserved_usd": served.worst_case_usd,
            "prompt_tokens": facts.prompt_tokens,
            "completion_tokens": facts.completion_tokens,
            "tokens_unknown": facts.tokens_unknown,
        },
        "upstream_ms": round(facts.upstream_s * 1000, 3),
    }
    if facts.commit_rule is not None:
        fields["commit"] = {"rule": facts.commit_rule, "tokens": facts.commit_tokens}
    if facts.continued_by is not None:
        fields["continued"] = {"model": facts.continued_by, "after_tokens": facts.continued_after_tokens}
    if facts.trace is not None:
        fields["stages"] = stage_rows(facts, facts.trace)
    return fields


def stage_rows(facts: CascadeFacts, trace: DecisionTrace) -> list[dict[str, Any]]:
    """One row per upstream call, in order: the route stage it served (None: a black-box scorer's
    own call, or a continuation), its charge and time, its score against the threshold and the
    stage's decision (``accepted``, ``escalated`` with the reason, ``committed`` on a prefix,
    ``answered`` for the final stage, ``failed``)."""
    scores, escalations = list(trace.scores), list(trace.escalations)
    rows: list[dict[str, Any]] = []
    position, previous_end = 0, trace.started
    route = facts.route
    for index, call in enumerate(trace.calls):
        stage = _stage_of(route, position, call.model)
        if stage is not None:
            position = stage
        row = _call_row(call, stage, previous_end)
        previous_end = call.settled_at
        if stage is not None:
            score = _take(scores, call.model)
            if score is not None:
                row["score"], row["threshold"] = score.score, score.threshold
            escalation = _take(escalations, call.model)
            row["decision"], row["reason"] = _decision(facts, call, index, trace, escalation)
            if stage == 0 and facts.commit_rule is not None:
                row["commit"] = {"rule": facts.commit_rule, "tokens": facts.commit_tokens}
        rows.append(row)
    return rows


def _call_row(call: CallNote, stage: int | None, previous_end: float) -> dict[str, Any]:
    return {
        "stage": stage,
        "model": call.model,
        "attempts": call.attempts,
        "billed_attempts": call.billed,
        "retries": max(0, call.attempts - 1),
        "prompt_tokens": call.prompt_tokens,
        "completion_tokens": call.completion_tokens,
        "cost_usd": call.usd,
        "bound_usd": call.bound_usd,
        # Stages run one after another: a call's time runs from the end of the one before it.
        "latency_ms": round(max(0.0, call.settled_at - previous_end) * 1000, 3),
        # From the call's start to its first streamed chunk; None: read whole (not streamed).
        "first_token_ms": None if call.first_token_s is None else round(call.first_token_s * 1000, 3),
        "score": None,
        "threshold": None,
        "decision": None,
        "reason": None,
    }


def _stage_of(route: list[str], position: int, model: str) -> int | None:
    """The route stage at or after ``position`` that ``model`` serves, or None (not a stage's call)."""
    for stage in range(position, len(route)):
        if route[stage] == model:
            return stage
    return None


def _take(notes: list[Any], model: str) -> Any:
    """The first note of ``model`` (removed), or None."""
    for i, note in enumerate(notes):
        if (note.model if hasattr(note, "model") else note[0]) == model:
            return notes.pop(i)
    return None


def _decision(
    facts: CascadeFacts, call: CallNote, index: int, trace: DecisionTrace, escalation: tuple[str, str] | None
) -> tuple[str, str | None]:
    if escalation is not None:
        return "escalated", escalation[1]
    if facts.answered_by == call.model and all(c.model != call.model for c in trace.calls[index + 1 :]):
        if facts.commit_rule is not None and facts.route and call.model == facts.route[0]:
            return "committed", facts.commit_rule
        if facts.degraded:
            return "degraded", None
        return ("accepted" if facts.score is not None and call.model != facts.route[-1] else "answered"), None
    if facts.failures:
        return "failed", facts.failures[-1]
    return "called", None


def _body(value: Any, bodies: BodyPolicy) -> str | None:
    """A body as redacted text cut at ``bodies.chars`` (a note says how much was cut)."""
    if value is None:
        return None
    raw = value if isinstance(value, bytes) else orjson.dumps(value)
    text = bodies.redact(raw.decode("utf-8", "replace"))
    if len(text) <= bodies.chars:
        return text
    return f"{text[: bodies.chars]}… [{len(text) - bodies.chars} more characters not kept]"
