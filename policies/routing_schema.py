"""A tier's router mechanism and the policy's pre-generation router, as the policy file holds them.

``cascade calibrate --mechanisms`` may give a tier ``routing`` (routed or hybrid, docs/routing.md)
instead of serving its cascade; the policy (or its kind section) then carries the ``router`` that
scores every model from the request's features. Part of the policy file model (``policies.schema``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from policies.route_features import FEATURE_SETS, feature_dims
from policies.schema_base import StrictModel, without_absent
from policies.score_distribution import ModelScoreBins


class MechanismOutcome(StrictModel):
    """A mechanism's held-out mean cost (USD per request) and quality for a tier."""

    cost_usd: float = Field(ge=0)
    quality: float = Field(ge=0, le=1)


class TierRouting(StrictModel):
    """How a tier serves when calibration chose a router over its cascade (docs/routing.md).

    ``routed``: one call, to ``argmax_m p_m(x) - price_weight * cost_m`` of the policy's ``router``.
    ``hybrid``: ``models`` is ``[cheap, strong]``: a request with ``p_cheap(x) < direct_below`` goes
    straight to the strong model, any other runs cheap -> strong escalating iff score < ``threshold``
    (a single model in ``models``: every request goes to it). The tier's ``routes`` stay its
    calibrated cascade: the gateway serves them when the router's features cannot be computed in
    time. ``compared``: each mechanism's held-out mean cost and quality for this tier. The tier's
    ``expected`` describes the mechanism served.
    """

    mechanism: Literal["routed", "hybrid"]
    price_weight: float | None = Field(None, ge=0)
    models: list[str] | None = Field(None, min_length=1, max_length=2)
    threshold: float | None = None
    direct_below: float | None = Field(None, ge=0, le=1)
    compared: dict[Literal["cascade", "routed", "hybrid"], MechanismOutcome] = Field(default_factory=dict)
    # The router's probability on the calibration rows (routed: the chosen model's; hybrid: the
    # cheap model's), binned as a score distribution: the gateway's drift metric compares live ones.
    probability: ModelScoreBins | None = None

    @model_validator(mode="after")
    def _fields_match_mechanism(self) -> TierRouting:
        if self.mechanism == "routed":
            if self.price_weight is None or self.models is not None or self.threshold is not None:
                raise ValueError("a routed tier has a price_weight and no models or threshold")
            return self
        if self.models is None or self.price_weight is not None:
            raise ValueError("a hybrid tier has models and no price_weight")
        pair = len(self.models) == 2
        if pair != (self.threshold is not None) or pair != (self.direct_below is not None):
            raise ValueError(
                "a hybrid tier of two models has a threshold and direct_below (one model: neither)"
            )
        if self.threshold is not None and not math.isfinite(self.threshold):
            raise ValueError("thresholds must be finite numbers")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_absent(
            self, handler, ("price_weight", "models", "threshold", "direct_below", "probability")
        )


class RouterSpec(StrictModel):
    """A pre-generation router (``policies.router.LinearRouter``): per model, P(correct) =
    sigmoid(coef . features + intercept) on feature set ``features`` (``policies.route_features``);
    ``cost_usd`` is each model's mean calibration cost (what a routed tier's price weight multiplies);
    ``components``: the principal components calibration kept (folded into ``coef``; informative)."""

    features: Literal["cheap-v1", "minilm-v1"]
    components: int | None = Field(None, ge=1)
    models: list[str] = Field(min_length=1)
    cost_usd: list[float]
    coef: list[list[float]]
    intercept: list[float]

    @model_validator(mode="after")
    def _shapes(self) -> RouterSpec:
        k = len(self.models)
        if len(self.cost_usd) != k or len(self.coef) != k or len(self.intercept) != k:
            raise ValueError("router: cost_usd, coef and intercept need one entry per model")
        dims = feature_dims(self.features)
        if any(len(row) != dims for row in self.coef):
            raise ValueError(f"router: feature set {self.features} has {dims} features per coef row")
        if any(not math.isfinite(v) for row in self.coef for v in row) or any(c < 0 for c in self.cost_usd):
            raise ValueError("router: coefficients must be finite and costs non-negative")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_absent(self, handler, ("components",))


assert set(FEATURE_SETS) == {"cheap-v1", "minilm-v1"}  # RouterSpec.features names every set


def check_routing(
    where: str, router: RouterSpec | None, models: Collection[str], tiers: Mapping[str, TierRouting | None]
) -> None:
    """A tier with ``routing`` needs the router beside it, naming known models, as its own models do.

    ``tiers``: each tier's ``routing`` (None: the tier serves its cascade); ``where`` prefixes errors.
    """
    if router is not None:
        unknown = [m for m in router.models if m not in models]
        if unknown:
            raise ValueError(f"{where}router names unknown model(s) {unknown}")
    for name, routing in tiers.items():
        if routing is None:
            continue
        if router is None:
            raise ValueError(f"{where}tier {name!r} has routing but there is no router")
        unknown = [m for m in routing.models or [] if m not in router.models]
        if unknown:
            raise ValueError(
                f"{where}tier {name!r} routing names model(s) {unknown} the router does not score"
            )
