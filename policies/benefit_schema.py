"""The fitted model of the ``escalation_benefit`` scorer as a policy carries it (``ScorerSpec.benefit``,
docs/contracts.md#scorers): written by ``cascade calibrate --benefit-scorer``, read by the gateway
through ``policies.benefit.BenefitModel``."""

from __future__ import annotations

from itertools import pairwise

from pydantic import Field, model_validator

from policies.benefit import FEATURES, BenefitModel
from policies.schema_base import StrictModel


class BenefitSpec(StrictModel):
    """One pair's benefit model: ``scored`` escalates to ``escalates_to``; ``features`` must be
    ``policies.benefit.FEATURES`` (a policy fitted on other features is refused, not misread);
    ``mean``/``scale``/``coefficients`` one number per feature; the isotonic map's ``knots_x``
    strictly increasing and ``knots_y`` in [0, 1], non-decreasing. ``fitted_on``: the labelled
    queries it was fitted on, ``helps`` how many of them escalation helped."""

    scored: str = Field(min_length=1)
    escalates_to: str = Field(min_length=1)
    features: list[str]
    mean: list[float]
    scale: list[float]
    coefficients: list[float]
    intercept: float
    knots_x: list[float] = Field(min_length=2)
    knots_y: list[float] = Field(min_length=2)
    fitted_on: int = Field(ge=4)
    helps: int = Field(ge=2)

    @model_validator(mode="after")
    def _consistent(self) -> BenefitSpec:
        if self.features != list(FEATURES):
            raise ValueError(f"benefit features must be {list(FEATURES)}, got {self.features}")
        for name in ("mean", "scale", "coefficients"):
            if len(getattr(self, name)) != len(FEATURES):
                raise ValueError(f"benefit {name} needs one number per feature ({len(FEATURES)})")
        if any(not s > 0 for s in self.scale):
            raise ValueError("benefit scale values must be positive")
        if len(self.knots_x) != len(self.knots_y):
            raise ValueError("benefit knots_x and knots_y must have the same length")
        if any(b <= a for a, b in pairwise(self.knots_x)):
            raise ValueError("benefit knots_x must be strictly increasing")
        if any(not 0 <= y <= 1 for y in self.knots_y) or any(b < a for a, b in pairwise(self.knots_y)):
            raise ValueError("benefit knots_y must lie in [0, 1] and not decrease")
        if self.scored == self.escalates_to:
            raise ValueError("benefit scored and escalates_to must be different models")
        return self

    def model(self) -> BenefitModel:
        """The model that scores answers (``policies.benefit.BenefitModel``)."""
        return BenefitModel(
            mean=tuple(self.mean),
            scale=tuple(self.scale),
            coefficients=tuple(self.coefficients),
            intercept=self.intercept,
            knots_x=tuple(self.knots_x),
            knots_y=tuple(self.knots_y),
        )
