"""The scorers, one definition each (docs/contracts.md#scorers): the registry every other part reads.

A scorer is a ``ScorerDefinition``: its name, the range of its scores, what it needs from a model
(the scored model's logprobs, with or without ``top_k`` alternatives per position, or extra calls),
and how it scores. A logprob scorer scores the answer's own ``logprobs.content`` with a function of
``policies.token_scores``; a black-box scorer (``Calls``) makes extra calls built by
``policies.blackbox`` and scores their replies. Calibration applies these definitions to recorded
logprobs and recorded calls and the gateway to live ones: the same function on both sides, so a
threshold chosen offline means the same thing online. Higher score = more confident; ``None`` when
the answer (or the extra call) gave nothing usable.

Who reads the registry: the policy schema (scorer names, their settings, threshold ranges), the
capability check (``policies.capabilities``), the gateway's scoring and reservation
(``gateway.stages.blackbox_scoring``), collection's extra calls (``collection.scorer_calls``),
calibration's scores (``calibration.runs``, ``calibration.blackbox_scores``) and the docs' scorer
tables (checked by tests/test_contracts_doc.py). A new scorer is one entry of ``REGISTRY`` (plus
its row in docs/contracts.md#scorers, which the test asks for).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from policies.benefit import BenefitModel
from policies.blackbox import (
    SELF_REPORT_PROMPT,
    VERIFIER_PROMPT,
    Equivalent,
    answer_text,
    consistency_score,
    first_position,
    sample_request,
    self_report_request,
    self_report_score,
    verifier_request,
    verifier_score_from_position,
)
from policies.call_tokens import select_tokens
from policies.errors import UnknownScorerError
from policies.request_defaults import RequestDefaults, merge_request_defaults
from policies.token_scores import (
    TokenEntry,
    TokenLogprobs,
    TokenScore,
    mean_logprob,
    mean_token_negentropy,
    min_probability,
    min_token_negentropy,
    plain_mean,
    plain_min,
    plain_negentropies,
    probability_margin,
    quantile_token_negentropy,
    sequence_probability,
)

# What a scorer needs from the scored model: its chosen tokens' logprobs, those and ``top_k``
# alternatives per position, or nothing (the score comes from extra calls).
Needs = Literal["logprobs", "alternatives", "calls"]


@dataclass(frozen=True, slots=True)
class CallSettings:
    """What a black-box scorer's extra calls are made with: from a policy's ``ScorerSpec``
    (``Calls.settings``) or from ``cascade collect``'s options.

    ``model``: the scorer's own model (a configured model name) when it calls one; ``prompt``: the
    question it asks; ``samples``: how many calls of a repeated scorer; ``temperature``: theirs.
    """

    top_k: int = 15
    model: str | None = None
    prompt: str | None = None
    samples: int = 1
    temperature: float | None = None


@dataclass(frozen=True, slots=True)
class Calls:
    """How a black-box scorer scores an answer with extra calls.

    ``request(settings, stage_body, answer, model)``: one extra call's body, from the scored stage's
    upstream body and its answer text (``model``: the called model's upstream name); ``reading``: what
    one reply gives the score (what ``cascade collect`` records under ``recorded_as``); ``score(answer,
    readings, equivalent)``: the score from the readings of all the calls (``equivalent`` is the
    policy's equivalence for a ``repeated`` scorer, else None). ``recorded_settings``: the settings a
    recorded entry carries, with their default when it lacks one (calibration checks that the rows
    agree on them); ``policy_fields``: the ``ScorerSpec`` fields from those settings.
    ``own_model``: the calls go to the scorer's own model (``settings.model``, which must give
    logprobs with ``top_k`` alternatives), else to the scored stage's; ``quotes_answer``: the request
    quotes the answer (its size is bounded by the reservation); ``repeated``: ``settings.samples``
    calls, recorded as a list and compared by an equivalence. ``alternatives``: how many
    alternatives a reading carries (the ``top_k`` calibration writes for an ``own_model`` scorer).
    ``collect_flag``: the ``cascade collect`` option that records the calls (named where missing).
    """

    settings: Callable[[Any], CallSettings]
    request: Callable[[CallSettings, Mapping[str, Any], str, str], dict[str, Any]]
    reading: Callable[[Mapping[str, Any]], Any]
    score: Callable[[str, Sequence[Any], Equivalent | None], float | None]
    recorded_as: str
    recorded_settings: Mapping[str, Any]
    policy_fields: Callable[[Mapping[str, Any]], dict[str, Any]]
    collect_flag: str
    own_model: bool = False
    quotes_answer: bool = False
    repeated: bool = False
    alternatives: Callable[[Any], int] | None = None

    def calls(self, settings: CallSettings) -> int:
        """How many extra calls score one answer."""
        return settings.samples if self.repeated else 1

    def body(
        self,
        settings: CallSettings,
        stage_body: Mapping[str, Any],
        answer: str,
        model: str,
        request_defaults: RequestDefaults | None,
    ) -> dict[str, Any]:
        """One extra call's request body as sent: a call to the scorer's own model is sent like any
        call to a configured model (its ``request_defaults`` under the scorer's fields); a call to the
        stage's model is built from the stage's upstream body, which already carries them."""
        body = self.request(settings, stage_body, answer, model)
        return merge_request_defaults(body, request_defaults) if self.own_model else body


@dataclass(frozen=True, slots=True)
class ScorerDefinition:
    """One scorer: ``tokens`` (a logprob scorer) or ``calls`` (a black-box scorer), exactly one.

    ``score_range``: the values it can give; a threshold outside them is meaningless (above the top it
    escalates every answer, below the bottom none), so the policy schema refuses it.
    ``alternatives``: its score is made of the ``top_k`` alternatives per position (a model giving
    fewer changes it: ``policies.capabilities``); else it reads the chosen tokens only.
    ``from_negentropies``: the same score from ``token_scores.plain_negentropies`` (the fast path for
    small answers). ``required_fields``/``optional_fields``: the ``ScorerSpec`` settings it takes
    (any other setting is an error). ``fitted``: it scores with a model calibration fitted for one
    pair of models (``policies.benefit``), carried by the policy tier that uses it; ``tokens`` then
    only refuses to score without it.
    """

    name: str
    score_range: tuple[float, float]
    tokens: TokenScore | None = None
    alternatives: bool = False
    from_negentropies: Callable[[list[float]], float | None] | None = None
    calls: Calls | None = None
    required_fields: tuple[str, ...] = ()
    optional_fields: tuple[str, ...] = ()
    fitted: bool = False

    def __post_init__(self) -> None:
        if (self.tokens is None) == (self.calls is None):
            raise ValueError(f"scorer {self.name}: exactly one of tokens or calls")

    @property
    def needs(self) -> Needs:
        """What it needs from the scored model (the docs' scorer tables show it)."""
        if self.calls is not None:
            return "calls"
        return "alternatives" if self.alternatives else "logprobs"


def _verifier_settings(spec: Any) -> CallSettings:
    return CallSettings(top_k=spec.top_k, model=spec.verifier.model, prompt=spec.verifier.prompt)


def _verifier_request(
    settings: CallSettings, stage: Mapping[str, Any], answer: str, model: str
) -> dict[str, Any]:
    messages = stage.get("messages") or []
    prompt = settings.prompt or VERIFIER_PROMPT
    return verifier_request(messages, answer, model=model, prompt=prompt, top_logprobs=settings.top_k)


def _alternatives_of(position: Any) -> int:
    return len(position.get("top_logprobs") or []) if isinstance(position, Mapping) else 0


def _sample(settings: CallSettings, stage: Mapping[str, Any], answer: str, model: str) -> dict[str, Any]:
    assert settings.temperature is not None
    return sample_request(stage, settings.temperature)


def _agreement(answer: str, samples: Sequence[Any], equivalent: Equivalent | None) -> float | None:
    assert equivalent is not None
    return consistency_score(answer, [str(sample) for sample in samples], equivalent)


def _follow_up(settings: CallSettings, stage: Mapping[str, Any], answer: str, model: str) -> dict[str, Any]:
    return self_report_request(stage, answer, prompt=settings.prompt or SELF_REPORT_PROMPT)


_NO_FIT = (
    "scorer {name} scores with its fitted model (ScorerSpec.benefit), which cascade calibrate "
    "--benefit-scorer writes into a tier"
)


def _needs_its_fit(tokens: TokenLogprobs) -> float | None:
    raise UnknownScorerError(_NO_FIT.format(name="escalation_benefit"))


_UNIT = (0.0, 1.0)

REGISTRY: dict[str, ScorerDefinition] = {
    definition.name: definition
    for definition in (
        ScorerDefinition(
            "mean_token_negentropy", _UNIT, mean_token_negentropy, True, from_negentropies=plain_mean
        ),
        ScorerDefinition(
            "min_token_negentropy", _UNIT, min_token_negentropy, True, from_negentropies=plain_min
        ),
        ScorerDefinition("q10_token_negentropy", _UNIT, quantile_token_negentropy, True),
        ScorerDefinition("probability_margin", _UNIT, probability_margin, True),
        ScorerDefinition("min_probability", _UNIT, min_probability),
        ScorerDefinition("sequence_probability", _UNIT, sequence_probability),
        ScorerDefinition("mean_logprob", (-math.inf, 0.0), mean_logprob),
        # P(escalating would not help), from a model fitted for the tier's pair (policies.benefit).
        ScorerDefinition(
            "escalation_benefit", _UNIT, _needs_its_fit, True, fitted=True, required_fields=("benefit",)
        ),
        # P(yes) among the verifier's first-token alternatives.
        ScorerDefinition(
            "verifier",
            _UNIT,
            calls=Calls(
                settings=_verifier_settings,
                request=_verifier_request,
                reading=first_position,
                score=lambda answer, readings, equivalent: verifier_score_from_position(readings[0]),
                recorded_as="first_token",
                recorded_settings={"model": None, "prompt": VERIFIER_PROMPT},
                policy_fields=lambda v: {"verifier": {"model": v.get("model"), "prompt": v.get("prompt")}},
                collect_flag="--verifier MODEL",
                own_model=True,
                quotes_answer=True,
                alternatives=_alternatives_of,
            ),
            required_fields=("verifier",),
        ),
        # The share of samples agreeing with the answer.
        ScorerDefinition(
            "consistency",
            _UNIT,
            calls=Calls(
                settings=lambda spec: CallSettings(samples=spec.samples, temperature=spec.temperature),
                request=_sample,
                reading=lambda reply: answer_text(reply) or "",
                score=_agreement,
                recorded_as="samples",
                recorded_settings={"temperature": None},
                policy_fields=lambda v: {k: v.get(k) for k in ("samples", "temperature", "equivalence")},
                collect_flag="--consistency K",
                repeated=True,
            ),
            required_fields=("samples", "temperature", "equivalence"),
        ),
        # A stated percentage.
        ScorerDefinition(
            "self_report",
            _UNIT,
            calls=Calls(
                settings=lambda spec: CallSettings(prompt=spec.prompt or SELF_REPORT_PROMPT),
                request=_follow_up,
                reading=answer_text,
                score=lambda answer, readings, equivalent: self_report_score(readings[0]),
                recorded_as="text",
                recorded_settings={"prompt": SELF_REPORT_PROMPT},
                policy_fields=lambda v: {"prompt": v.get("prompt")},
                collect_flag="--self-report",
                quotes_answer=True,
            ),
            optional_fields=("prompt",),
        ),
    )
}

# Views of the registry, by what the readers ask.
SCORER_NAMES: tuple[str, ...] = tuple(REGISTRY)
# The logprob scorers any answer can be scored by (a fitted one needs its tier's model).
SCORERS: dict[str, TokenScore] = {
    name: d.tokens for name, d in REGISTRY.items() if d.tokens is not None and not d.fitted
}
FITTED_SCORERS: tuple[str, ...] = tuple(name for name, d in REGISTRY.items() if d.fitted)
BLACKBOX_SCORERS: tuple[str, ...] = tuple(name for name, d in REGISTRY.items() if d.calls is not None)
SCORE_RANGES: dict[str, tuple[float, float]] = {name: d.score_range for name, d in REGISTRY.items()}
ALTERNATIVE_SCORERS = frozenset(name for name, d in REGISTRY.items() if d.alternatives)


def blackbox_calls(name: str) -> Calls | None:
    """The extra calls of scorer ``name`` (None: a logprob scorer, or not a registered scorer)."""
    definition = REGISTRY.get(name)
    return None if definition is None else definition.calls


def score_logprobs(
    content: Sequence[TokenEntry] | None,
    scorer: str,
    top_k: int,
    tokens: str = "all",
    benefit: BenefitModel | None = None,
) -> float | None:
    """Confidence of one answer from its ``choices[i].logprobs.content`` list.

    Args:
        content: the OpenAI token-logprob entries (``token``, ``logprob``, ``top_logprobs``).
        scorer: one of ``SCORERS`` (docs/contracts.md#scorers); ``external`` cannot be computed here.
        top_k: K, the number of alternatives the scorer uses per position.
        tokens: which positions are scored (``ScorerSpec.tokens``): ``all``, or ``call_values``,
            the tokens of a call's function name and argument values when the answer is wholly
            calls, else all (``policies.call_tokens``).
        benefit: a fitted scorer's model (``ScorerSpec.benefit``); None for every other scorer.

    Returns:
        The score (higher = more confident), or None when no position is usable.
    """
    definition = REGISTRY.get(scorer)
    function = None if definition is None else definition.tokens
    if definition is None or function is None:
        raise UnknownScorerError(
            f"scorer {scorer!r} cannot be computed from logprobs; choose one of {', '.join(SCORERS)}"
        )
    if tokens != "all":
        content = select_tokens(content, tokens)
    if definition.fitted:
        if benefit is None:
            raise UnknownScorerError(_NO_FIT.format(name=scorer))
        return benefit.score(content, top_k)
    reducer = definition.from_negentropies
    if reducer is not None and content:
        values = plain_negentropies(content, top_k)
        if values is not None:
            return reducer(values)
    parsed = TokenLogprobs.from_content(content, top_k, with_alternatives=definition.alternatives)
    return function(parsed)


def score_response(
    response: Mapping[str, Any],
    scorer: str,
    top_k: int,
    tokens: str = "all",
    benefit: BenefitModel | None = None,
) -> float | None:
    """Score the first choice of a chat/completions response body (None if it has no logprobs);
    ``tokens`` and ``benefit`` as in ``score_logprobs``."""
    choices = response.get("choices") or []
    # ``type(...) is dict`` first: a parsed body's objects are dicts, and the ABC check costs more
    # than the rest of this function.
    choice = choices[0] if choices else None
    if type(choice) is not dict and not isinstance(choice, Mapping):
        return None
    logprobs = choice.get("logprobs")
    if type(logprobs) is not dict and not isinstance(logprobs, Mapping):
        return None
    if "content" not in logprobs and "token_logprobs" in logprobs:
        return score_logprobs(legacy_to_content(logprobs), scorer, top_k, tokens, benefit)
    return score_logprobs(logprobs.get("content"), scorer, top_k, tokens, benefit)


def legacy_to_content(logprobs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Convert legacy ``/v1/completions`` logprobs (parallel lists) to ``content`` entries."""
    tokens = logprobs.get("tokens") or []
    chosen = logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or []
    content = []
    for i, token in enumerate(tokens):
        top = tops[i] if i < len(tops) and isinstance(tops[i], Mapping) else {}
        content.append(
            {
                "token": token,
                "logprob": chosen[i] if i < len(chosen) else None,
                "top_logprobs": [{"token": t, "logprob": lp} for t, lp in top.items()],
            }
        )
    return content
