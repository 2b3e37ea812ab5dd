"""A stage's answer beyond its score: calls written as content, structural checks, escalation reasons.

The cascade engine (gateway.engine.cascade) calls this module at few places (docs/tool-calls.md):

* after a scored stage was scored: ``AnswerReview.review`` normalizes the calls of a model that
  writes them as content (``capabilities.tool_calls: content``) and checks the answer
  (``policies.answer_checks.check_answer``); ``AnswerReview.scored`` then decides, the check
  first: an invalid answer escalates whatever its score;
* after the final stage answered: ``AnswerReview.final`` does the same, but the answer is returned
  as it is (the client decides) and only counted; a live stream is assembled by ``StreamedAnswer``
  and checked when it ends;
* at every escalation: ``AnswerReview.escalated`` records and counts its reason.

Order matters: the score is computed on the raw reply, whose content logprobs are the tokens of a
call written as content, and only then is the call moved into ``tool_calls``.

Reasons (``EscalationReason``, the ``reason`` label of ``cascade_escalation_reasons_total``):
``low_score`` (a score below the threshold); a missing score (the policy's ``on_missing_score`` is
``escalate``) says why: ``tool_call_only`` (only tool calls, no content tokens), ``empty_answer``
(no content), ``no_logprobs`` (content, but no usable logprobs); ``invalid_tool_call`` /
``invalid_structured_output`` (a failed check); ``truncated`` (the answer stopped at a completion
cap the client did not set, ``policies.truncation.cut_short``: the stage did not finish, whatever its
score); ``upstream_error`` (the call failed); ``content_policy`` (the provider's safety system
refused the request and ``upstream_errors.content_policy`` is ``escalate``); ``slow_first_token`` (no
first token within the model's ``first_token_timeout_s``); ``circuit_open`` (the model was not
called: its circuit breaker is open); ``scorer_failed`` (a black-box scorer's own call failed: the
score is missing).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from gateway.config.settings import ModelConfig
from gateway.telemetry.metrics import GatewayMetrics
from gateway.wire.facts import CascadeFacts
from gateway.wire.requests import ParsedRequest
from gateway.wire.tool_call_fragments import ToolCallFragments
from policies import should_escalate
from policies.answer_checks import AnswerProblem, check_answer
from policies.tool_calls import normalize_message, request_kind
from policies.truncation import cut_short


class EscalationReason(StrEnum):
    """Why a scored stage escalated: the ``reason`` label of ``cascade_escalation_reasons_total``,
    ``x-cascade-escalation-reason`` and ``escalation_reasons`` (docs/contracts.md#metrics)."""

    LOW_SCORE = "low_score"
    NO_LOGPROBS = "no_logprobs"
    TOOL_CALL_ONLY = "tool_call_only"
    EMPTY_ANSWER = "empty_answer"
    INVALID_TOOL_CALL = "invalid_tool_call"
    INVALID_STRUCTURED_OUTPUT = "invalid_structured_output"
    TRUNCATED = "truncated"  # cut at a completion cap the client did not set (policies.truncation)
    UPSTREAM_ERROR = "upstream_error"
    CONTENT_POLICY = "content_policy"  # a content-policy refusal, escalated (upstream_errors.content_policy)
    # No first token within the model's ``first_token_timeout_s`` (the stage was cancelled).
    SLOW_FIRST_TOKEN = "slow_first_token"
    SCORER_FAILED = "scorer_failed"  # a black-box scorer's own call failed (gateway.stages.blackbox_scoring)
    CIRCUIT_OPEN = "circuit_open"  # not called: its circuit breaker is open (gateway.upstream.breaker)

    @property
    def missing_score(self) -> bool:
        """A missing score: the share of these per tier is what the missing-scores alert watches."""
        return self in _MISSING_SCORE

    @property
    def keeps_fallback(self) -> bool:
        """The escalated answer may still be served degraded: it was read and is not certainly wrong
        (no failed structural check)."""
        return self not in _NO_FALLBACK


_MISSING_SCORE = frozenset(
    {
        EscalationReason.NO_LOGPROBS,
        EscalationReason.TOOL_CALL_ONLY,
        EscalationReason.EMPTY_ANSWER,
        EscalationReason.SCORER_FAILED,
    }
)
_NO_FALLBACK = frozenset(
    {
        EscalationReason.INVALID_TOOL_CALL,
        EscalationReason.INVALID_STRUCTURED_OUTPUT,
        EscalationReason.UPSTREAM_ERROR,
        EscalationReason.CONTENT_POLICY,
        EscalationReason.SLOW_FIRST_TOKEN,
        EscalationReason.CIRCUIT_OPEN,
    }
)


def missing_score_reason(reply: Mapping[str, Any]) -> EscalationReason:
    """Why a reply has no score: ``tool_call_only``, ``empty_answer`` or ``no_logprobs``."""
    choices = reply.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(choice, Mapping):
        return EscalationReason.EMPTY_ANSWER
    message = choice.get("message")
    message = message if isinstance(message, Mapping) else {}
    text = message.get("content") if "message" in choice else choice.get("text")
    if isinstance(text, str) and text.strip():
        return EscalationReason.NO_LOGPROBS  # text to score, but the upstream gave no usable logprobs for it
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        return EscalationReason.TOOL_CALL_ONLY
    return EscalationReason.EMPTY_ANSWER


class AnswerReview:
    """Normalizes and checks stage answers, and counts invalid answers and escalation reasons."""

    def __init__(self, models: Mapping[str, ModelConfig], metrics: GatewayMetrics):
        self._models = models
        self._metrics = metrics

    def writes_calls(self, model: str, request: ParsedRequest) -> bool:
        """Whether ``model``'s answers to ``request`` need their calls moved out of the content:
        a chat request that may call a declared function, to a model that writes calls as content."""
        return (
            request.api == "chat"
            and self._models[model].capabilities.tool_calls == "content"
            and request_kind(request.body) == "tool_call"
        )

    def scored(
        self,
        model: str,
        request: ParsedRequest,
        reply: dict[str, Any],
        facts: CascadeFacts,
        score: float | None,
        threshold: float,
        on_missing_score: str,
    ) -> EscalationReason | None:
        """A scored stage's answer (already scored on the raw reply): why it escalates, or None to
        keep it; ``reply`` is normalized in place (``review``).

        A failed check comes first (whatever the score: the answer is no fallback either), then a
        cut answer (``truncated``: an unfinished answer is not accepted on its score; it stays a
        possible degraded fallback, its ``finish_reason`` says it was cut), then the score."""
        # Read before normalizing: a call written as content that has no logprobs lacks logprobs,
        # it is not an answer without content tokens.
        missing = missing_score_reason(reply) if score is None else None
        problem = self.review(model, request, reply, facts)
        if problem is not None:
            return EscalationReason(problem.kind)  # a certain failure, whatever the score
        if cut_short(request.body, reply):
            return EscalationReason.TRUNCATED
        if not should_escalate(score, threshold, on_missing_score):
            return None
        return missing or EscalationReason.LOW_SCORE

    def review(
        self, model: str, request: ParsedRequest, reply: dict[str, Any], facts: CascadeFacts
    ) -> AnswerProblem | None:
        """Normalize ``reply``'s choices (calls written as content, for such a model: each such
        choice is replaced by a normalized copy) and check every choice; an invalid answer is
        recorded in ``facts`` and counted. Its first problem, or None."""
        if request.api != "chat":
            return None  # /v1/completions: no messages, no tools, no response_format
        found = reply.get("choices")
        choices: list[Any] = found if isinstance(found, list) else []
        normalize = self.writes_calls(model, request)
        problem: AnswerProblem | None = None
        for index, choice in enumerate(choices):
            message = choice.get("message") if isinstance(choice, dict) else None
            if not isinstance(message, dict):
                continue
            if normalize:
                # A new choice, not an edit: the traffic sampler may hold the raw one (as collected).
                message = dict(message)
                if normalize_message(message):
                    choices[index] = {**choice, "message": message, "finish_reason": "tool_calls"}
            problem = problem or check_answer(request.body, message)
        if problem is not None:
            self._invalid(model, problem, facts)
        return problem

    def final(self, model: str, request: ParsedRequest, reply: dict[str, Any], facts: CascadeFacts) -> None:
        """Review the final stage's answer: returned as it is, an invalid one counted and reported."""
        problem = self.review(model, request, reply, facts)
        facts.answer_problem = problem.kind if problem is not None else None

    def watch(self, model: str, request: ParsedRequest, facts: CascadeFacts) -> StreamedAnswer | None:
        """An assembler for a live final stage whose answer can fail a check (tools or a JSON
        ``response_format``), or None when there is nothing to check."""
        body = request.body
        if request.api != "chat" or not (body.get("tools") or request_kind(body) == "structured_output"):
            return None
        return StreamedAnswer(self, model, request, facts)

    def escalated(self, tier: str, model: str, reason: EscalationReason, facts: CascadeFacts) -> None:
        """Record and count why ``model``'s stage escalated."""
        facts.escalation_reasons.append(reason)
        if facts.trace is not None:  # the console is on (gateway.wire.trace)
            facts.trace.escalated(model, reason)
        metrics = self._metrics
        metrics.child(metrics.escalation_reasons, tier, model, reason).inc()

    def _invalid(self, model: str, problem: AnswerProblem, facts: CascadeFacts) -> None:
        facts.invalid_answers.append((model, problem))
        metrics = self._metrics
        metrics.child(metrics.invalid_answers, facts.tier, model, problem.kind).inc()


class StreamedAnswer:
    """The messages of a live chat stream, assembled from its chunks and checked when it ends.

    The client has the answer already: this only counts and reports it (``AnswerReview.final``).
    Tool-call fragments are joined per call index as OpenAI clients do (gateway.wire.tool_call_fragments).
    """

    def __init__(self, review: AnswerReview, model: str, request: ParsedRequest, facts: CascadeFacts):
        self._review = review
        self._model = model
        self._request = request
        self._facts = facts
        self._messages: dict[int, dict[str, Any]] = {}
        self._calls: dict[int, ToolCallFragments] = {}

    def observe(self, event: Mapping[str, Any]) -> None:
        """Add one upstream chunk."""
        for choice in event.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, Mapping) else None
            if not isinstance(delta, Mapping):
                continue
            index = choice.get("index", 0)
            index = index if isinstance(index, int) else 0
            message = self._messages.setdefault(index, {"content": None})
            if isinstance(delta.get("content"), str):
                message["content"] = (message["content"] or "") + delta["content"]
            for fragment in delta.get("tool_calls") or ():
                if isinstance(fragment, Mapping):
                    self._calls.setdefault(index, ToolCallFragments()).add(fragment)

    def close(self) -> None:
        """The stream ended: check the assembled answer (counted and reported like a final stage's)."""
        choices = []
        for index, message in sorted(self._messages.items()):
            calls = self._calls.get(index)
            if calls:
                message["tool_calls"] = calls.as_chat()
            choices.append({"index": index, "message": message})
        self._review.final(self._model, self._request, {"choices": choices}, self._facts)
