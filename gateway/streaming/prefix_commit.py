"""The ``prefix`` commit rule: decide a streamed cheap stage on its first tokens.

A tier's ``commit`` (``policies.commit.CommitRule``) says when a streamed request's cheap stage is
decided. ``buffer`` (no ``commit``) reads the cheap stage's whole answer, scores it and only then
relays or escalates. ``prefix`` streams the cheap stage and holds its first ``tokens`` content
tokens (with ``boundary: line``, up to the end of its first line if that comes first); the tier's
scorer is applied to the logprobs of those tokens alone (``policies.score_logprobs`` on the
truncated list: the function calibration applies to the recorded prefix), then:

* commit: the response starts (the decision headers, ``x-cascade-commit: prefix`` and
  ``x-cascade-commit-tokens``), the held chunks are relayed and the rest of the cheap answer
  streams live. Nothing is taken back: an answer that is later cut at a cap the client did not set
  ends with ``finish_reason: length`` and is not escalated (the ``truncated`` rule can only hold
  before the first byte);
* escalate: the cheap call is cancelled (charged by ``money.charges``: its usage if the stream
  reported one, else the chunks read plus the model's declared ``cancel_overrun_tokens``, its
  worst case when it declares none) and the final stage streams live.

A cheap answer that ends before the decision point is decided as under ``buffer``, on the whole
answer (its ``truncated`` rule included). "The prefix" is ``policies.commit.prefix_entries``: the
definition calibration scores recorded answers with.

The rule applies only where it can: a streamed text request (``RoutePlan.kind``; tool calls and
structured output keep ``buffer``) on a named tier whose route has two stages, with a logprob
scorer (``policies.schema`` refuses a prefix rule beside a black-box scorer, and on a tier with
``routing``: such a tier calls one model and streams it natively). Non-streamed requests are never
affected.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from gateway.routing.tier_choice import RoutePlan
from gateway.wire.tool_call_fragments import ToolCallFragments
from policies.commit import CommitRule, line_end, prefix_entries
from policies.schema import ScorerSpec
from policies.scorers import legacy_to_content


def prefix_rule(plan: RoutePlan) -> CommitRule | None:
    """The tier's ``prefix`` rule when it applies to a streamed request planned as ``plan``, else None."""
    policy, route = plan.policy, plan.route
    if policy is None or route is None or len(route.models) != 2 or plan.kind != "text":
        return None
    tier = policy.tiers.get(plan.tier)
    if tier is None or tier.commit is None or tier.commit.rule != "prefix" or tier.routing is not None:
        return None
    if policy.scorer.is_blackbox:
        return None
    return tier.commit


class PrefixGate:
    """Holds a cheap stage's first stream chunks until the decision point (see the module docstring).

    ``hold(event)`` keeps one upstream chunk and says whether the decision point is reached: the
    prefix of ``policies.commit.prefix_entries`` (``tokens`` logprob entries, or with ``boundary:
    line`` up to the first later entry whose token ends a line) is complete. Tokens are counted as
    their logprob entries, the positions calibration reads from the recorded answers, so the prefix
    scored live is the prefix scored offline. ``events`` are the held chunks, as received.
    """

    __slots__ = (
        "_boundary",
        "_calls",
        "_finish",
        "_legacy",
        "_limit",
        "_prefix",
        "_text",
        "entries",
        "events",
        "reached",
    )

    def __init__(self, rule: CommitRule | None, legacy: bool = False):
        """``legacy``: the stream is a ``/v1/completions`` one (``text`` and parallel logprob lists).
        ``rule`` None: no decision point, the whole stream is held (a buffered stage requested
        streamed for its first-token deadline: ``answer`` is its whole answer)."""
        assert rule is None or rule.tokens is not None
        self._limit = sys.maxsize if rule is None or rule.tokens is None else rule.tokens
        self._boundary = None if rule is None else rule.boundary
        self._legacy = legacy
        self._calls: ToolCallFragments | None = None  # a chat answer's tool calls, when it has some
        self._text: list[str] = []
        self._finish: Any = None
        self.entries: list[Mapping[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.reached = False
        # The prefix, once the decision point is reached (the entries held stop growing there).
        self._prefix: list[Mapping[str, Any]] | None = None

    def hold(self, event: dict[str, Any]) -> bool:
        """Keep ``event``; True when the decision point is reached with it."""
        self.events.append(event)
        for choice in event.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue  # one answer per cascade request (n > 1 is refused)
            delta = None if self._legacy else choice.get("delta")
            if self._legacy:
                text = choice.get("text")
            else:
                text = delta.get("content") if isinstance(delta, dict) else None
            self._text.append(text if isinstance(text, str) else "")
            if isinstance(delta, dict) and delta.get("tool_calls"):
                self._hold_calls(delta["tool_calls"])
            entries = self._choice_entries(choice)
            if entries and not self.reached:
                start = len(self.entries)
                self.entries.extend(entries)
                self.reached = len(self.entries) >= self._limit or (
                    self._boundary == "line" and line_end(self.entries, self._limit, start) is not None
                )
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        return self.reached

    def _hold_calls(self, fragments: Any) -> None:
        """Join a chat delta's tool-call fragments (gateway.wire.tool_call_fragments)."""
        calls = self._calls = self._calls or ToolCallFragments()
        for fragment in fragments if isinstance(fragments, list) else ():
            if isinstance(fragment, Mapping):
                calls.add(fragment)

    @property
    def prefix(self) -> list[Mapping[str, Any]]:
        """The entries the rule scores (``policies.commit.prefix_entries`` of those held)."""
        if self._prefix is not None:
            return self._prefix
        prefix = prefix_entries(self.entries, self._limit, self._boundary)
        if self.reached:  # final: computed once for the score, the commit position and the metrics
            self._prefix = prefix
        return prefix

    @property
    def tokens(self) -> int:
        """How many content tokens the decision reads (the commit position)."""
        return len(self.prefix)

    def _choice_entries(self, choice: dict[str, Any]) -> list[Mapping[str, Any]]:
        # Parsed JSON: its objects are dicts.
        logprobs = choice.get("logprobs")
        if not isinstance(logprobs, dict):
            return []
        if self._legacy and "content" not in logprobs:
            return list(legacy_to_content(logprobs))
        content = logprobs.get("content")
        return [e for e in content if isinstance(e, dict)] if isinstance(content, list) else []

    def score(self, spec: ScorerSpec) -> float | None:
        """The tier's scorer on the prefix's logprobs (None: no usable position)."""
        return spec.score_content(self.prefix)

    def answer(self, usage: Any) -> dict[str, Any] | None:
        """The whole answer of a stream that ended before the decision point, as a non-streamed
        body (scored and checked as under ``buffer``); None when no chunk carried a choice."""
        first = next((e for e in self.events if e.get("choices")), None)
        if first is None:
            return None
        text = "".join(self._text)
        choice: dict[str, Any] = {"index": 0, "finish_reason": self._finish}
        if self._legacy:
            choice.update(text=text, logprobs=_legacy_logprobs(self.entries))
        else:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if self._calls:
                message.update(content=text or None, tool_calls=self._calls.as_chat())
            choice.update(message=message, logprobs={"content": list(self.entries)})
        body: dict[str, Any] = {
            "id": first.get("id"),
            "object": "text_completion" if self._legacy else "chat.completion",
            "created": first.get("created"),
            "model": first.get("model"),
            "choices": [choice],
        }
        if first.get("system_fingerprint"):
            body["system_fingerprint"] = first["system_fingerprint"]
        if usage is not None:
            body["usage"] = usage
        return body


def _legacy_logprobs(entries: list[Mapping[str, Any]]) -> dict[str, Any]:
    """``content`` entries back in the legacy completions form (parallel lists)."""
    return {
        "tokens": [e.get("token") for e in entries],
        "token_logprobs": [e.get("logprob") for e in entries],
        "top_logprobs": [
            {a.get("token"): a.get("logprob") for a in e.get("top_logprobs") or () if isinstance(a, Mapping)}
            for e in entries
        ],
    }
