"""The calibration's score distribution in a policy, and the drift statistic computed against it.

A policy may record, per scored model (a model that is a non-final stage of some tier's route),
where its confidence scores fell on the calibration rows: bin ``edges`` (the distinct deciles of
those scores) and, per tier, the share of that model's scores in each bin among the requests of
the tier that reach it (docs/contracts.md#policy-file). The gateway bins live scores on the same
edges and compares them with the Population Stability Index (``population_stability_index``).

Bins are half-open: bin 0 is ``(-inf, edges[0])``, bin i is ``[edges[i-1], edges[i])`` and the
last is ``[edges[-1], +inf)``, so every score, also one outside the calibration's range, has a bin
(``bin_index``; ``numpy.searchsorted(edges, scores, side="right")`` gives the same).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from itertools import pairwise

import numpy as np
from pydantic import Field, field_validator, model_validator

from policies.schema_base import StrictModel

# Deciles: ten bins, so that each holds a tenth of the calibration scores when scores do not tie.
DEFAULT_BIN_COUNT = 10
# Stand-in for an empty bin's share (live or calibration), so that the logarithm stays finite: one
# empty bin then adds at most about e * ln(e / 1e-4) ~ 0.9 * e to the index.
PSI_EPSILON = 1e-4
# Proportions come from a JSON round trip of float divisions.
_SUM_TOLERANCE = 1e-6


def _check_proportions(values: list[float]) -> list[float]:
    if any(not math.isfinite(v) or v < 0 or v > 1 for v in values):
        raise ValueError("bin proportions must be finite numbers in [0, 1]")
    if abs(sum(values) - 1.0) > _SUM_TOLERANCE:
        raise ValueError(f"bin proportions must sum to 1, got {sum(values)}")
    return values


class ModelScoreBins(StrictModel):
    """Bins of one scored model: ``edges`` and the share of all calibration rows in each bin."""

    # At most 99 edges (percentiles): the gateway keeps one counter per bin and time bucket.
    edges: list[float] = Field(min_length=1, max_length=99, description="strictly increasing finite edges")
    proportions: list[float] = Field(min_length=2, description="share of calibration rows per bin")

    @field_validator("edges")
    @classmethod
    def _edges_finite_and_increasing(cls, edges: list[float]) -> list[float]:
        if any(not math.isfinite(e) for e in edges):
            raise ValueError("bin edges must be finite numbers")
        if any(b <= a for a, b in pairwise(edges)):
            raise ValueError("bin edges must be strictly increasing")
        return edges

    @field_validator("proportions")
    @classmethod
    def _proportions_sum_to_one(cls, proportions: list[float]) -> list[float]:
        return _check_proportions(proportions)

    @model_validator(mode="after")
    def _one_proportion_per_bin(self) -> ModelScoreBins:
        if len(self.proportions) != len(self.edges) + 1:
            raise ValueError(
                f"{len(self.edges)} edge(s) make {len(self.edges) + 1} bins, "
                f"got {len(self.proportions)} proportion(s)"
            )
        return self


class ScoreDistribution(StrictModel):
    """The calibration's score distribution (optional field ``score_distribution`` of a policy).

    ``tiers[tier][model]`` is the share of the model's scores per bin of ``models[model].edges``
    among the calibration rows that reach the model in that tier (route weights applied): what
    the gateway should see live in that tier if traffic looks like the calibration data.
    """

    calibration_rows: int = Field(ge=1, description="number of calibration queries the bins come from")
    models: dict[str, ModelScoreBins] = Field(min_length=1)
    tiers: dict[str, dict[str, list[float]]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _tier_bins_match_models(self) -> ScoreDistribution:
        for tier, per_model in self.tiers.items():
            for model, proportions in per_model.items():
                if model not in self.models:
                    raise ValueError(f"tier {tier!r}: model {model!r} has no bin edges")
                bins = len(self.models[model].edges) + 1
                if len(proportions) != bins:
                    raise ValueError(f"tier {tier!r}, model {model!r}: needs {bins} proportions")
                _check_proportions(proportions)
        return self

    def check_references(self, models: Sequence[str], tiers: Sequence[str]) -> None:
        """ValueError unless every model and tier named here is one of the policy's."""
        unknown_models = sorted(set(self.models) - set(models))
        if unknown_models:
            raise ValueError(f"score_distribution names unknown model(s) {unknown_models}")
        unknown_tiers = sorted(set(self.tiers) - set(tiers))
        if unknown_tiers:
            raise ValueError(f"score_distribution names unknown tier(s) {unknown_tiers}")


def decile_edges(scores: np.ndarray, bin_count: int = DEFAULT_BIN_COUNT) -> list[float]:
    """Distinct inner quantiles (1/b, ..., (b-1)/b) of ``scores``: at most ``b - 1`` edges.

    Tied quantiles collapse into one edge, so a model whose scores pile up on a value gets fewer,
    wider bins rather than empty ones. ValueError on no scores or non-finite scores.
    """
    values = np.asarray(scores, dtype=np.float64)
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError("bin edges need at least one score and only finite scores")
    quantiles = np.quantile(values, np.arange(1, bin_count) / bin_count)
    return [float(e) for e in np.unique(quantiles)]


def bin_counts(edges: Sequence[float], scores: np.ndarray, weight: float = 1.0) -> np.ndarray:
    """Per-bin count of ``scores`` (times ``weight``), bins as in the module docstring."""
    index = np.searchsorted(np.asarray(edges, dtype=np.float64), np.asarray(scores), side="right")
    return np.bincount(index, minlength=len(edges) + 1).astype(np.float64) * weight


def bin_index(edges: Sequence[float], score: float) -> int:
    """The bin of one score: O(log bins) on the request path, equal to ``bin_counts``'s binning."""
    return bisect_right(edges, score)


def population_stability_index(
    observed_counts: Sequence[float], expected_proportions: Sequence[float], epsilon: float = PSI_EPSILON
) -> float:
    """PSI = sum_i (o_i - e_i) * ln(o_i / e_i) of observed shares o against expected shares e.

    ``o_i`` is ``observed_counts[i]`` over their total; a share below ``epsilon`` (an empty bin)
    counts as ``epsilon`` on both sides. 0 means identical distributions; the usual reading is
    < 0.1 stable, 0.1-0.25 a moderate shift, > 0.25 a significant shift. NaN without observations.
    """
    if len(observed_counts) != len(expected_proportions):
        raise ValueError("observed counts and expected proportions need the same bins")
    total = float(sum(observed_counts))
    if total <= 0:
        return math.nan
    psi = 0.0
    for count, expected in zip(observed_counts, expected_proportions, strict=True):
        o = max(count / total, epsilon)
        e = max(float(expected), epsilon)
        psi += (o - e) * math.log(o / e)
    return psi
