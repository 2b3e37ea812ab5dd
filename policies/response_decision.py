"""The decision a gateway response carried, however it travelled (docs/serving.md#streaming).

The gateway tells a client how its request was decided in up to three ways:

1. the ``x-cascade-*`` response headers (docs/serving.md, the table of response headers), when the
   decision was made before the response started;
2. SSE comment lines (``: x-cascade-model: small``) before the first event of a stream the gateway
   started early (``limits.stream_start_after_s``): its headers left before the decision, so they
   carry none of it (``gateway.streaming.early_start.decision_comment``);
3. the ``cascade`` object of a stream's last chunk: the final facts (a live stage's cost is known
   only at its end).

``DecisionReader`` reads all three, each later one overriding the earlier (headers, then comment
lines, then the ``cascade`` object), into one ``ResponseDecision``. It is the one reader of a
response's decision: ``cascade replay``, the benches and the tests read a served response through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

HEADER_PREFIX = "x-cascade-"
# The comment line an early-started stream writes for one decision header.
_COMMENT_PREFIX = ": " + HEADER_PREFIX


@dataclass(frozen=True, slots=True)
class ResponseDecision:
    """How the gateway decided one request, as its response carried it.

    ``None`` (``escalated`` included) where the response carried no such fact (a header absent or
    ``none``). ``final``: the stream's last chunk carried its ``cascade`` object (the facts are the
    ones the request ended with; a non-streamed response's headers are final too, but say so only
    through ``cost_usd`` being present).
    """

    tier: str | None = None
    policy_id: str | None = None
    model: str | None = None
    models_called: tuple[str, ...] = ()
    escalated: bool | None = None
    escalation_reasons: tuple[str, ...] = ()
    score: float | None = None
    threshold: float | None = None
    cost_usd: float | None = None
    overhead_ms: float | None = None
    degraded: bool = False
    over_budget: bool = False
    mechanism: str | None = None
    router_probability: float | None = None
    commit: str | None = None
    commit_tokens: int | None = None
    final: bool = False


class DecisionReader:
    """Collects a response's decision from its headers, SSE comment lines and ``cascade`` object.

    Made with the response's headers (any mapping of names to values; names compared in lower
    case); a stream's reader is then handed each SSE line that is not data (``comment``) and each
    parsed data chunk (``chunk``). ``decision()`` is the decision read so far.
    """

    __slots__ = ("_facts", "_headers")

    def __init__(self, headers: Mapping[str, str] | None = None) -> None:
        self._headers = {
            name.lower(): value
            for name, value in (headers or {}).items()
            if name.lower().startswith(HEADER_PREFIX)
        }
        self._facts: Mapping[str, Any] | None = None

    def comment(self, line: str) -> bool:
        """Read one SSE line if it is a decision comment (``: x-cascade-NAME: VALUE``); whether it was."""
        if not line.startswith(_COMMENT_PREFIX):
            return False
        name, _, value = line[2:].partition(":")
        self._headers[name.strip().lower()] = value.strip()
        return True

    def chunk(self, chunk: Mapping[str, Any]) -> None:
        """Read one stream chunk: keeps its ``cascade`` object, if it carries one (the last does)."""
        facts = chunk.get("cascade")
        if isinstance(facts, Mapping):
            self._facts = facts

    def decision(self) -> ResponseDecision:
        """The decision read so far: the headers and comment lines, overridden by the ``cascade`` object."""
        read = _from_headers(self._headers)
        if self._facts is not None:
            read.update(_from_facts(self._facts), final=True)
        return ResponseDecision(**read)


def _from_headers(headers: Mapping[str, str]) -> dict[str, Any]:
    def text(name: str) -> str | None:
        value = headers.get(HEADER_PREFIX + name)
        return None if value is None or value in ("", "none") else value

    def listed(name: str) -> tuple[str, ...]:
        return tuple(part for part in (text(name) or "").split(",") if part)

    escalated = text("escalated")
    tokens = text("commit-tokens")
    return {
        "tier": text("tier"),
        "policy_id": text("policy"),
        "model": text("model"),
        "models_called": listed("models-called"),
        "escalated": None if escalated is None else escalated == "true",
        "escalation_reasons": listed("escalation-reason"),
        "score": _number(text("score")),
        "threshold": _number(text("threshold")),
        "cost_usd": _number(text("cost-usd")),
        "overhead_ms": _number(text("overhead-ms")),
        "degraded": text("degraded") == "true",
        "over_budget": text("over-budget") == "true",
        "mechanism": text("mechanism"),
        "router_probability": _number(text("router-probability")),
        "commit": text("commit"),
        "commit_tokens": int(tokens) if tokens is not None and tokens.isdigit() else None,
    }


def _from_facts(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a ``cascade`` object carries (``gateway.wire.facts.CascadeFacts.as_dict``)."""
    read: dict[str, Any] = {
        "tier": facts.get("tier"),
        "policy_id": facts.get("policy"),
        "model": facts.get("model"),
        "models_called": tuple(facts.get("models_called") or ()),
        "escalated": bool(facts.get("escalated")),
        "escalation_reasons": tuple(facts.get("escalation_reasons") or ()),
        "score": facts.get("score"),
        "threshold": facts.get("threshold"),
        "cost_usd": facts.get("cost_usd"),
        "overhead_ms": facts.get("overhead_ms"),
        "degraded": bool(facts.get("degraded")),
    }
    if "mechanism" in facts:
        read.update(mechanism=facts["mechanism"], router_probability=facts.get("router_probability"))
    commit = facts.get("commit")
    if isinstance(commit, Mapping):
        read.update(commit=commit.get("rule"), commit_tokens=commit.get("tokens"))
    return read


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None and value != "nan" else None
    except ValueError:
        return None
