"""The policy file model (docs/contracts.md#policy-file): what calibration writes and the gateway serves.

Everything here is a contract. Field names and meanings must not change without bumping
``schema_version`` and documenting a migration in the README.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from policies.benefit import BenefitModel
from policies.benefit_schema import BenefitSpec
from policies.blackbox import SELF_REPORT_PROMPT, VERIFIER_PROMPT
from policies.call_tokens import ScoreTokens
from policies.commit import CommitRule
from policies.routing_schema import RouterSpec, TierRouting, check_routing
from policies.schema_base import StrictModel, without_absent
from policies.score_distribution import ScoreDistribution
from policies.scorers import REGISTRY, SCORE_RANGES, SCORER_NAMES, score_logprobs, score_response
from policies.shift_reference import ShiftReference

SCHEMA_VERSION: Literal[1] = 1

# The registered scorers (policies.scorers.REGISTRY), then ``external``: a score column computed
# elsewhere, which calibration reads and the gateway cannot serve. Built from the registry, so the
# JSON Schema (policies/policy.schema.json) lists the same names in the same order.
if TYPE_CHECKING:
    ScorerName = str
else:
    ScorerName = Literal[(*SCORER_NAMES, "external")]
Equivalence = Literal["exact", "numeric", "choice", "similarity"]

# Weights of a randomized mixture must sum to 1 up to float noise from JSON round trips.
_WEIGHT_TOLERANCE = 1e-6


class VerifierSpec(StrictModel):
    """The ``verifier`` scorer's second model: a configured model name that returns logprobs, and
    the prompt it is asked (``{question}`` and ``{answer}`` are replaced)."""

    model: str = Field(min_length=1)
    prompt: str = VERIFIER_PROMPT

    @field_validator("prompt")
    @classmethod
    def _has_placeholders(cls, prompt: str) -> str:
        missing = [p for p in ("{question}", "{answer}") if p not in prompt]
        if missing:
            raise ValueError(f"the verifier prompt must contain {' and '.join(missing)}")
        return prompt


# The ScorerSpec settings some scorer takes (its definition's required and optional fields); a
# setting of another scorer is an error, so a policy never carries settings that do nothing.
_SCORER_OPTIONAL = tuple(
    dict.fromkeys(f for d in REGISTRY.values() for f in (*d.required_fields, *d.optional_fields))
)


class ScorerSpec(StrictModel):
    """Which confidence score the cheap model's answer is judged by (docs/contracts.md#scorers).

    Logprob scorers read the answer's own logprobs (``top_k`` alternatives asked of the scored
    stage). The black-box scorers (``policies.blackbox``) make extra calls: ``verifier`` asks
    ``verifier.model`` (with ``top_k`` alternatives), ``consistency`` draws ``samples`` answers of
    the stage at ``temperature`` and compares them by ``equivalence``, ``self_report`` asks the
    stage model ``prompt`` (default ``policies.blackbox.SELF_REPORT_PROMPT``).
    """

    name: ScorerName = "mean_token_negentropy"
    top_k: int = Field(15, ge=1, le=20, description="top_logprobs requested from the upstream")
    tokens: ScoreTokens = Field(
        "all",
        description="positions scored: all, or call_values (a call's function name and argument values; "
        "all tokens when the answer is not a call)",
    )
    verifier: VerifierSpec | None = None
    samples: int | None = Field(None, ge=1, le=20, description="consistency: extra samples per answer")
    temperature: float | None = Field(None, ge=0, le=2, description="consistency: sampling temperature")
    equivalence: Equivalence | None = None
    prompt: str | None = Field(None, min_length=1, description="self_report: the follow-up question")
    benefit: BenefitSpec | None = None

    @model_validator(mode="after")
    def _fields_match_scorer(self) -> ScorerSpec:
        definition = REGISTRY.get(self.name)
        required = () if definition is None else definition.required_fields
        allowed = () if definition is None else definition.optional_fields
        missing = [f for f in required if getattr(self, f) is None]
        if missing:
            raise ValueError(f"scorer {self.name} needs {', '.join(missing)}")
        extra = [
            f for f in _SCORER_OPTIONAL if getattr(self, f) is not None and f not in (*required, *allowed)
        ]
        if extra:
            raise ValueError(f"not a setting of scorer {self.name}: {', '.join(extra)}")
        if self.is_blackbox and self.tokens != "all":
            raise ValueError(f"scorer {self.name} reads no logprobs: tokens must be all, got {self.tokens}")
        if self.is_fitted and self.tokens != "all":
            raise ValueError(f"scorer {self.name} was fitted on every token: tokens must be all")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_absent(self, handler, _SCORER_OPTIONAL)

    @property
    def is_blackbox(self) -> bool:
        """Whether the score comes from extra calls (``policies.scorers.Calls``) rather than logprobs."""
        definition = REGISTRY.get(self.name)
        return definition is not None and definition.calls is not None

    @property
    def is_fitted(self) -> bool:
        """Whether it scores with a model fitted for one pair (``ScorerDefinition.fitted``)."""
        definition = REGISTRY.get(self.name)
        return definition is not None and definition.fitted

    @cached_property
    def benefit_model(self) -> BenefitModel | None:
        """The fitted model ``escalation_benefit`` scores with, built once (None: another scorer)."""
        return None if self.benefit is None else self.benefit.model()

    def score_content(self, content: Any) -> float | None:
        """One answer's score from its ``logprobs.content`` (``policies.scorers.score_logprobs``)."""
        return score_logprobs(content, self.name, self.top_k, self.tokens, self.benefit_model)

    def score_reply(self, reply: Mapping[str, Any]) -> float | None:
        """A chat/completions body's score (``policies.scorers.score_response``)."""
        return score_response(reply, self.name, self.top_k, self.tokens, self.benefit_model)

    @property
    def own_model(self) -> str | None:
        """The configured model the scorer itself calls (the verifier's; ``Calls.own_model``), or None."""
        definition = REGISTRY.get(self.name)
        if definition is None or definition.calls is None or not definition.calls.own_model:
            return None
        return definition.calls.settings(self).model

    @property
    def self_report_prompt(self) -> str:
        """The self-report follow-up question (the default when the policy names none)."""
        return self.prompt or SELF_REPORT_PROMPT


class ModelStats(StrictModel):
    """Calibration-data summary of one model: mean cost per query (USD) and mean quality.

    ``scoring_cost_usd``: with a black-box scorer, the mean cost of the extra calls that score this
    model's answer (the verifier's call, the samples, the self-report), paid whenever the model is a
    scored (non-final) stage; already included in the tiers' and envelope's expected costs.
    """

    mean_cost_usd: float = Field(ge=0)
    quality: float = Field(ge=0, le=1)
    scoring_cost_usd: float | None = Field(None, ge=0)

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_absent(self, handler, ("scoring_cost_usd",))


class Objective(StrictModel):
    """A tier's objective: best quality within a budget (P2) or cheapest route reaching a quality (P1)."""

    max_cost_usd: float | None = Field(None, ge=0)
    min_quality: float | None = Field(None, ge=0, le=1)

    @model_validator(mode="after")
    def _exactly_one(self) -> Objective:
        if (self.max_cost_usd is None) == (self.min_quality is None):
            raise ValueError("objective needs exactly one of max_cost_usd or min_quality")
        return self


class Route(StrictModel):
    """A chain of models; stage i escalates to stage i+1 iff its score < thresholds[i].

    A ``fallback`` tier's route has no thresholds: stage i goes on to stage i+1 only when its call
    fails (``Tier``, which checks its routes' thresholds against its mechanism)."""

    weight: float = Field(1.0, gt=0, le=1)
    models: list[str] = Field(min_length=1)
    thresholds: list[float] = Field(default_factory=list)

    @model_validator(mode="after")
    def _thresholds_match_stages(self) -> Route:
        if self.thresholds and len(self.thresholds) != len(self.models) - 1:
            raise ValueError(
                f"a route of {len(self.models)} model(s) needs {len(self.models) - 1} "
                f"threshold(s), got {len(self.thresholds)}"
            )
        if len(set(self.models)) != len(self.models):
            raise ValueError(f"a route must not repeat a model: {self.models}")
        if any(not math.isfinite(t) for t in self.thresholds):
            raise ValueError("thresholds must be finite numbers")
        return self


class Spread(StrictModel):
    """A mean over held-out splits and its 2.5th and 97.5th percentiles over those splits."""

    mean: float = Field(ge=0)
    low: float = Field(ge=0)
    high: float = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> Spread:
        if self.low > self.high:
            raise ValueError(f"low {self.low:g} is above high {self.high:g}")
        return self


class HeldOut(StrictModel):
    """Out-of-sample expectations, cross-fitted: on each of ``splits`` random splits the tier's
    route is chosen on the calibration part and measured on the other ``test_fraction`` of the
    queries (``calibration.heldout_expected``)."""

    splits: int = Field(ge=1)
    test_fraction: float = Field(gt=0, lt=1)
    seed: int = 0
    cost_usd: Spread
    quality: Spread
    escalation_rate: Spread

    @model_validator(mode="after")
    def _rates_within_unit(self) -> HeldOut:
        for name in ("quality", "escalation_rate"):
            spread: Spread = getattr(self, name)
            if max(spread.mean, spread.high) > 1:
                raise ValueError(f"heldout {name} must lie in [0, 1]")
        return self


class Bounds(StrictModel):
    """What the tier promises at ``confidence``, one-sided (``calibration.bounds``): its mean
    quality is at least ``quality_min``, its mean cost per request at most ``cost_max``, its
    escalation rate within ``escalation``, all at once. ``split``: the route was chosen on
    ``selection_n`` queries and the bounds computed on ``n`` others (``estimators`` per measure,
    a union bound over ``statements``: four per way of serving the tier calibration chose among);
    costs were bounded by ``cost_range`` per request.
    ``target`` is the tier's objective as a statement; ``target_certified`` whether the bounds
    prove it, and ``more_queries`` about how many more labelled queries would (None: no number
    would, at the observed mean)."""

    confidence: float = Field(gt=0, lt=1)
    method: Literal["split"] = "split"
    n: int = Field(ge=1)
    selection_n: int = Field(ge=1)
    seed: int = 0
    statements: int = Field(default=4, ge=1)
    estimators: dict[str, str]
    quality_min: float = Field(ge=0, le=1)
    cost_max: float = Field(ge=0)
    cost_range: float = Field(ge=0)
    escalation: tuple[float, float]
    target: str | None = None
    target_certified: bool | None = None
    more_queries: int | None = Field(default=None, ge=1)

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_absent(self, handler, ("more_queries",))

    @model_validator(mode="after")
    def _escalation_interval(self) -> Bounds:
        low, high = self.escalation
        if not 0 <= low <= high <= 1:
            raise ValueError(f"escalation [{low:g}, {high:g}] must be an interval within [0, 1]")
        return self


class Expected(StrictModel):
    """Expected per-request cost (USD), quality and escalation rate on the calibration data, and
    optionally the same measured out of sample (``heldout``) and bounded (``bounds``)."""

    cost_usd: float = Field(ge=0)
    quality: float = Field(ge=0, le=1)
    escalation_rate: float = Field(ge=0, le=1)
    heldout: HeldOut | None = None
    # Optional, added to schema version 1: absent from policies written before it.
    bounds: Bounds | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_absent(self, handler, ("bounds",))

    def promise(self) -> tuple[float, float, float]:
        """``(cost_usd, quality, escalation_rate)`` to hold live traffic to: the held-out means when
        the policy has them (they were measured on queries the route was not chosen on), else the
        in-sample values."""
        if self.heldout is not None:
            h = self.heldout
            return h.cost_usd.mean, h.quality.mean, h.escalation_rate.mean
        return self.cost_usd, self.quality, self.escalation_rate


class Tier(StrictModel):
    """One budget tier: its objective, the route(s) that solve it and what they are expected to do."""

    objective: Objective
    routes: list[Route] = Field(min_length=1)
    expected: Expected
    # Quality per USD at this point of the envelope (frontier slope); None where undefined.
    shadow_price: float | None = None
    # Optional: a router mechanism chosen over the cascade for this tier (then ``routes`` is the fallback).
    routing: TierRouting | None = None
    # Optional: when a streamed request decides (policies.commit); absent = buffer, today's rule.
    commit: CommitRule | None = None
    # Optional: how the routes' stages follow each other. Absent or ``cascade``: scored, escalating
    # under a threshold. ``fallback``: the first stage that answers is served, the next is called
    # only when a call fails; nothing is scored (routes without thresholds).
    mechanism: Literal["cascade", "fallback"] | None = None
    # Optional: the tier's own scorer, in place of its section's (``escalation_benefit``, fitted for
    # the tier's pair by ``cascade calibrate --benefit-scorer``).
    scorer: ScorerSpec | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        document = without_absent(self, handler, ("routing", "commit", "mechanism", "scorer"))
        if self.commit is not None:  # only the rule's own fields, as written
            document["commit"] = self.commit.document()
        return document

    @model_validator(mode="after")
    def _routed_tiers_stream_natively(self) -> Tier:
        # A tier that routes before generation streams its one model live from its first token:
        # there is no cheap answer to decide on, so a prefix rule would silently do nothing.
        if self.routing is not None and self.commit is not None and self.commit.rule == "prefix":
            raise ValueError(
                f"a tier with routing ({self.routing.mechanism}) streams natively: "
                "it takes no prefix commit rule"
            )
        return self

    @model_validator(mode="after")
    def _routes_fit_mechanism(self) -> Tier:
        # A cascade's stage escalates under its threshold: one per stage but the last. A fallback
        # stage is not scored: a threshold would be a number that does nothing.
        fallback = self.mechanism == "fallback"
        for i, route in enumerate(self.routes):
            wanted = 0 if fallback else len(route.models) - 1
            if len(route.thresholds) != wanted:
                raise ValueError(
                    f"route {i + 1}: a {'fallback' if fallback else 'cascade'} route of "
                    f"{len(route.models)} model(s) needs {wanted} threshold(s), got {len(route.thresholds)}"
                )
        if fallback and self.routing is not None:
            raise ValueError("a fallback tier takes no routing: it serves the first model that answers")
        if fallback and self.commit is not None and self.commit.rule == "prefix":
            raise ValueError("a fallback tier scores nothing: it takes no prefix commit rule")
        return self

    @model_validator(mode="after")
    def _own_scorer_fits_routes(self) -> Tier:
        scorer = self.scorer
        if scorer is None:
            return self
        if scorer.is_blackbox or scorer.name == "external":
            raise ValueError(f"a tier's own scorer reads the answer's logprobs; {scorer.name} does not")
        if self.routing is not None or self.mechanism == "fallback":
            raise ValueError("a tier with its own scorer serves a cascade: no routing, no fallback")
        if scorer.benefit is not None:
            pair = [scorer.benefit.scored, scorer.benefit.escalates_to]
            if any(len(r.models) > 1 and r.models != pair for r in self.routes):
                raise ValueError(
                    f"scorer {scorer.name} was fitted for {' -> '.join(pair)}: every cascade route must be it"
                )
            if self.commit is not None and self.commit.rule == "prefix":
                raise ValueError(f"scorer {scorer.name} was fitted on whole answers: no prefix commit rule")
        return self

    @field_validator("routes")
    @classmethod
    def _weights_sum_to_one(cls, routes: list[Route]) -> list[Route]:
        total = sum(r.weight for r in routes)
        if abs(total - 1.0) > _WEIGHT_TOLERANCE:
            raise ValueError(f"route weights must sum to 1, got {total}")
        return routes


class EnvelopePoint(StrictModel):
    """One point of the pairwise envelope: a deterministic route and its calibration cost/quality."""

    cost_usd: float = Field(ge=0)
    quality: float = Field(ge=0, le=1)
    models: list[str] = Field(min_length=1)
    thresholds: list[float] = Field(default_factory=list)
    escalation_rate: float = Field(0.0, ge=0, le=1)

    @model_validator(mode="after")
    def _thresholds_match_stages(self) -> EnvelopePoint:
        if len(self.thresholds) != len(self.models) - 1:
            raise ValueError("an envelope point of k models needs k-1 thresholds")
        if len(set(self.models)) != len(self.models):
            raise ValueError(f"an envelope point must not repeat a model: {self.models}")
        return self

    def as_route(self) -> Route:
        """This point as a deterministic (weight 1) route."""
        return Route(weight=1.0, models=list(self.models), thresholds=list(self.thresholds))


# Request kinds that may have a section of their own; the top level of a policy serves the rest
# (text, and any kind without a section). ``policies.tool_calls.request_kind`` names a request's kind.
SectionKind = Literal["tool_call", "structured_output"]


class KindSection(StrictModel):
    """Routes for one request kind (``Policy.kinds``): calibrated from that kind's runs rows.

    Same meaning as the top-level fields of the same names. ``tiers`` has exactly the top level's
    tier names and ``default_tier`` is the top level's, so a client names a tier the same way
    whatever its request's kind; ``scorer`` defaults to the top level's.
    """

    models: dict[str, ModelStats] = Field(min_length=1)
    default_tier: str
    tiers: dict[str, Tier] = Field(min_length=1)
    envelope: list[EnvelopePoint] = Field(default_factory=list)
    scorer: ScorerSpec | None = None
    score_distribution: ScoreDistribution | None = None
    router: RouterSpec | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_absent(self, handler, ("router",))


_Derived = TypeVar("_Derived")


class Policy(StrictModel):
    """A complete, servable cascade policy (docs/contracts.md#policy-file)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    policy_id: str = Field(min_length=1, description="content hash, see policies.store")
    created_at: str = Field(description="ISO-8601 timestamp")
    scorer: ScorerSpec = ScorerSpec()
    models: dict[str, ModelStats] = Field(min_length=1)
    default_tier: str
    tiers: dict[str, Tier] = Field(min_length=1)
    envelope: list[EnvelopePoint] = Field(default_factory=list)
    # What to do when the cheap answer has no usable logprobs (docs/contracts.md#scorers).
    on_missing_score: Literal["escalate", "accept"] = "escalate"
    # Whether the cheap answer may be returned (marked degraded) when the escalation target fails.
    allow_degraded: bool = True
    # Optional: where scores fell on the calibration rows, for the gateway's drift metric.
    score_distribution: ScoreDistribution | None = None
    # Optional: routes of their own for requests of these kinds (the top level serves the others).
    kinds: dict[SectionKind, KindSection] | None = None
    # Optional: the pre-generation router the tiers with ``routing`` read (docs/routing.md).
    router: RouterSpec | None = None
    # Optional: the calibration's histograms the gateway's shift alarm tests live traffic against.
    shift_reference: ShiftReference | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_absent(self, handler, ("router", "shift_reference"))

    @model_validator(mode="after")
    def _references_resolve(self) -> Policy:
        _check_routes("", self.scorer, self.models, self.default_tier, self.tiers, self.envelope)
        check_routing("", self.router, self.models, {name: tier.routing for name, tier in self.tiers.items()})
        if self.score_distribution is not None:
            self.score_distribution.check_references(list(self.models), list(self.tiers))
        if self.shift_reference is not None:
            self.shift_reference.check_references(list(self.models), list(self.tiers))
        for kind, section in (self.kinds or {}).items():
            where = f"kinds.{kind}: "
            if set(section.tiers) != set(self.tiers) or section.default_tier != self.default_tier:
                raise ValueError(
                    f"{where}tiers {sorted(section.tiers)} (default {section.default_tier!r}) must be "
                    f"the top level's {sorted(self.tiers)} (default {self.default_tier!r})"
                )
            scorer = section.scorer or self.scorer
            tiers, envelope = section.tiers, section.envelope
            _check_routes(where, scorer, section.models, section.default_tier, tiers, envelope)
            check_routing(where, section.router, section.models, {n: t.routing for n, t in tiers.items()})
            if section.score_distribution is not None:
                try:
                    section.score_distribution.check_references(list(section.models), list(section.tiers))
                except ValueError as exc:
                    raise ValueError(f"{where}{exc}") from None
        return self

    # Values derived from this policy object (its kind views, its budget index), each built once:
    # a loaded policy is never changed. Kept in the instance's __dict__ (not a pydantic field or
    # private attribute, so equality and dumps ignore it); a copy starts without them, since
    # ``model_copy(update=...)`` may change what they were derived from.
    @cached_property
    def _derived(self) -> dict[Hashable, Any]:
        return {}

    def derived(self, key: Hashable, build: Callable[[], _Derived]) -> _Derived:
        """``build()``, called the first time ``key`` is asked of this policy object and kept by it
        (``policies.kinds.kind_policy``, ``policies.decision.budget_index``)."""
        derived = self._derived
        if key not in derived:
            derived[key] = build()
        value: _Derived = derived[key]
        return value

    def __copy__(self) -> Self:
        copied = super().__copy__()
        copied.__dict__.pop("_derived", None)
        return copied

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Self:
        copied = super().__deepcopy__(memo)
        copied.__dict__.pop("_derived", None)
        return copied


def _check_routes(
    where: str,
    scorer: ScorerSpec,
    models: dict[str, ModelStats],
    default_tier: str,
    tiers: dict[str, Tier],
    envelope: list[EnvelopePoint],
) -> None:
    """The rules of a route table (the top level's or a kind section's; ``where`` prefixes errors):
    the default tier exists, every route and envelope point names known models, the envelope is
    sorted by cost and every threshold lies within the scorer's range."""
    if default_tier not in tiers:
        raise ValueError(f"{where}default_tier {default_tier!r} is not one of the tiers {sorted(tiers)}")
    if scorer.is_fitted:
        raise ValueError(
            f"{where}scorer {scorer.name} is fitted for one pair of models: a tier's own scorer only"
        )
    for tier_name, tier in tiers.items():
        for route in tier.routes:
            unknown = [m for m in route.models if m not in models]
            if unknown:
                raise ValueError(f"{where}tier {tier_name!r} routes to unknown model(s) {unknown}")
    for point in envelope:
        unknown = [m for m in point.models if m not in models]
        if unknown:
            raise ValueError(f"{where}envelope point routes to unknown model(s) {unknown}")
    _check_threshold_ranges(where, scorer, tiers, envelope)
    for tier_name, tier in tiers.items():
        if tier.commit is not None and tier.commit.rule == "prefix" and scorer.is_blackbox:
            raise ValueError(
                f"{where}tier {tier_name!r}: a prefix commit rule scores token logprobs; scorer "
                f"{scorer.name} reads none"
            )
    costs = [p.cost_usd for p in envelope]
    if costs != sorted(costs):
        raise ValueError(f"{where}envelope points must be sorted by cost_usd")


def _check_threshold_ranges(
    where: str, scorer: ScorerSpec, tiers: dict[str, Tier], envelope: list[EnvelopePoint]
) -> None:
    """Every threshold within the scorer's range (``policies.scorers.SCORE_RANGES``).

    A threshold above the top escalates every answer and one below the bottom none: such a
    number is a mistake, not a policy. The next float above the top is allowed: calibration
    writes it for "escalate every answer" (``calibration.frontier.frontier_thresholds``).
    ``external`` scores have no known range.
    """
    chains = [
        (f"tier {name!r} route {i + 1}", tier.scorer or scorer, route.models, route.thresholds)
        for name, tier in tiers.items()
        for i, route in enumerate(tier.routes)
    ]
    chains += [(f"envelope point {i + 1}", scorer, p.models, p.thresholds) for i, p in enumerate(envelope)]
    for label, chain_scorer, models, thresholds in chains:
        bounds = SCORE_RANGES.get(chain_scorer.name)
        if bounds is None:
            continue
        low, high = bounds
        for stage, (model, threshold) in enumerate(zip(models, thresholds, strict=False)):
            if not low <= threshold <= math.nextafter(high, math.inf):
                raise ValueError(
                    f"{where}{label} stage {stage + 1} ({model}): threshold {threshold:g} is outside the "
                    f"range [{low:g}, {high:g}] of scorer {chain_scorer.name}"
                )
