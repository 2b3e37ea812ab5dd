"""The calibration's reference histograms for the gateway's shift alarm (optional policy field
``shift_reference``, docs/contracts.md#policy-file).

Per tier whose routes all start with the same scored model and have two stages: that model's
confidence score histogram on the calibration rows (``score``: bin ``edges``, bins as in
``policies.score_distribution``, and the rows' ``counts`` per bin, route weights applied) and the
tier's escalations (``escalation``: counts of accepted and escalated rows). Counts, not shares: the
alarm tests live traffic against them as a sample of ``calibration_rows`` queries
(``stats.shift_detector``), so a calibration on few rows does not make it fire more often.
"""

from __future__ import annotations

import math
from itertools import pairwise

from pydantic import Field, field_validator, model_validator

from policies.schema_base import StrictModel


def _counts(values: list[float]) -> list[float]:
    if any(not math.isfinite(v) or v < 0 for v in values) or sum(values) <= 0:
        raise ValueError("counts must be finite, non-negative and not all zero")
    return values


class ScoreHistogram(StrictModel):
    """Calibration rows per score bin: ``len(edges) + 1`` counts."""

    edges: list[float] = Field(min_length=1, max_length=99)
    counts: list[float] = Field(min_length=2)

    @field_validator("edges")
    @classmethod
    def _increasing(cls, edges: list[float]) -> list[float]:
        if any(b <= a for a, b in pairwise(edges)):
            raise ValueError("score edges must be strictly increasing")
        return edges

    @field_validator("counts")
    @classmethod
    def _valid_counts(cls, counts: list[float]) -> list[float]:
        return _counts(counts)

    @model_validator(mode="after")
    def _one_count_per_bin(self) -> ScoreHistogram:
        if len(self.counts) != len(self.edges) + 1:
            raise ValueError(
                f"{len(self.edges)} edge(s) make {len(self.edges) + 1} bins, got {len(self.counts)}"
            )
        return self


class TierShiftReference(StrictModel):
    """One tier's reference: its scored first stage, its score histogram and its escalations."""

    model: str = Field(min_length=1)
    score: ScoreHistogram
    escalation: list[float] = Field(min_length=2, max_length=2, description="rows [accepted, escalated]")

    @field_validator("escalation")
    @classmethod
    def _valid_counts(cls, counts: list[float]) -> list[float]:
        return _counts(counts)


class ShiftReference(StrictModel):
    """The policy's ``shift_reference`` field (see the module docstring)."""

    calibration_rows: int = Field(ge=1)
    tiers: dict[str, TierShiftReference] = Field(default_factory=dict)

    def check_references(self, models: list[str], tiers: list[str]) -> None:
        """ValueError unless every tier and model named here is one of the policy's."""
        unknown_tiers = sorted(set(self.tiers) - set(tiers))
        if unknown_tiers:
            raise ValueError(f"shift_reference names unknown tier(s) {unknown_tiers}")
        unknown_models = sorted({t.model for t in self.tiers.values()} - set(models))
        if unknown_models:
            raise ValueError(f"shift_reference names unknown model(s) {unknown_models}")
