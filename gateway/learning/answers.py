"""What a sample carries: the query, the answers the request itself produced, and their texts.

``StageAnswer`` is one model's answer to a sampled query as a traffic row needs it (the first
choice, usage, latency, the policy's score). A ``DrawnRequest`` (a request the sampler drew) makes
one for each scored stage the cascade engine hands it (only drawn requests: unsampled ones never
build these), and the shadow calls make one for every other model. The helpers turn a request and
an answer into the texts a judge compares.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from gateway.wire.requests import ParsedRequest
from money.charges import Charge
from policies import Policy
from policies.blackbox import content_text
from policies.scorers import legacy_to_content


@dataclass(slots=True, frozen=True)
class StageAnswer:
    """One model's answer: its first choice, latency, score, and the tokens and USD its call was
    charged (a traffic row is re-priced by these counts: ``money.charges.Charge``'s, which the
    charging rule read from any usage form or estimated without one)."""

    choice: dict[str, Any]
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    score: float | None
    cost_usd: float = 0.0

    @classmethod
    def from_reply(
        cls,
        body: dict[str, Any],
        seconds: float,
        score: float | None,
        charge: Charge,
        *,
        copy: bool = False,
    ) -> StageAnswer:
        """From an upstream completion body and the charge of its call (``money.charges``: the
        tokens it was priced by, whatever form the upstream's usage took, or none; its USD may
        include what the answer cost beyond that call, a black-box scorer's calls). ``copy``: keep a private
        copy of the first choice, for a body that is also the client's answer to a request for
        logprobs (``cascade.client_body`` trims its alternatives in place). Otherwise the choice is
        shared, not copied: copying a 25 KB logprob tree costs as much as parsing it."""
        choices = body.get("choices")
        first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        return cls(
            choice=orjson.loads(orjson.dumps(first)) if copy else first,
            prompt_tokens=charge.prompt_tokens,
            completion_tokens=charge.completion_tokens,
            seconds=seconds,
            score=score,
            cost_usd=charge.usd,
        )

    def text(self) -> str:
        """The answer as text: chat content (or its tool calls as JSON), or the completion's text."""
        if "message" in self.choice:
            message = self.choice.get("message")
            if not isinstance(message, dict):
                return ""
            content = content_text(message.get("content"))
            if not content and message.get("tool_calls"):
                return orjson.dumps(message["tool_calls"]).decode()
            return content
        text = self.choice.get("text")
        return text if isinstance(text, str) else ""

    def logprobs(self) -> list[dict[str, Any]] | None:
        """The ``logprobs.content`` list (legacy completions logprobs converted), or None."""
        logprobs = self.choice.get("logprobs")
        if not isinstance(logprobs, dict):
            return None
        if "content" not in logprobs and "token_logprobs" in logprobs:
            return legacy_to_content(logprobs)
        content = logprobs.get("content")
        return content if isinstance(content, list) else None


@dataclass(slots=True)
class Sample:
    """A sampled request, queued once its response was sent.

    Attributes:
        query_id: the request id (unique per request), the rows' ``query_id``.
        request: the client's parsed request (shadow calls are built from it as the cascade would).
        policy: the policy that served it (its pool, scorer and id).
        tier: the tier label served.
        answers: the request's own scored answers by model (reused, never bought again).
        timestamp: when the request was answered (UTC).
        kind: the request's kind (``RoutePlan.kind``), recorded in every row of the sample.
        routed: the router's decision on the request path (``RoutedAs``), None when its tier
            has no routing or the router did not run.
    """

    query_id: str
    request: ParsedRequest
    policy: Policy
    tier: str
    answers: dict[str, StageAnswer]
    timestamp: datetime
    kind: str = "text"
    routed: RoutedAs | None = None


@dataclass(slots=True, frozen=True)
class RoutedAs:
    """How a routed tier's router decided a drawn request (``RoutePlan``'s fields of the same
    names): ``mechanism``, the probability behind it, the features it read (None: not computed),
    and the models of the route it chose (``models``)."""

    mechanism: str
    router_probability: float | None
    features: Any
    models: tuple[str, ...] = ()


@dataclass(slots=True)
class DrawnRequest:
    """A request the sampler drew, while it is served: the engine hands ``keep`` each scored answer.

    Attributes:
        request: the client's parsed request.
        policy: the policy serving it (as it serves the request's kind: its section for that kind).
        kind: the request's kind, which picked that section.
        answers: the scored answers kept so far, by model.
        routed: the router's decision, for a request of a routed tier (``RoutedAs``).
    """

    request: ParsedRequest
    policy: Policy
    kind: str = "text"
    answers: dict[str, StageAnswer] = field(default_factory=dict)
    routed: RoutedAs | None = None

    def keep(
        self,
        model: str,
        body: dict[str, Any],
        seconds: float,
        score: float | None,
        charge: Charge,
    ) -> None:
        """Keep ``model``'s scored answer and the stage's charge (``CascadeFacts.keep_answer``).

        A request for logprobs gets a private copy of the choice: the client's answer is trimmed
        in place afterwards (``cascade.client_body``)."""
        self.answers[model] = StageAnswer.from_reply(
            body, seconds, score, charge, copy=self.request.wants_logprobs
        )


def question_text(request: ParsedRequest) -> str:
    """The request as text for a judge: the one message's text, else ``role: text`` per message;
    the prompt of a legacy completion (token-id prompts have no text)."""
    body = request.body
    if request.api == "chat":
        messages = [m for m in body.get("messages") or () if isinstance(m, dict)]
        if len(messages) == 1:
            return content_text(messages[0].get("content"))
        return "\n\n".join(f"{m.get('role')}: {content_text(m.get('content'))}" for m in messages)
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "\n".join(p for p in prompt if isinstance(p, str))
    return ""
