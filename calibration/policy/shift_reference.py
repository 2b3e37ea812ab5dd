"""The policy's ``shift_reference``: per tier, the calibration rows' histogram of the cheap stage's
score and of the tier's escalations (``policies.shift_reference``), for the gateway's shift alarm.

A tier gets one when every route has two stages and starts with the same scored model: then every
request of the tier is scored by that model once, and the live histograms the gateway keeps are of
the same population as these (all calibration rows; route weights applied). A route escalates a
row iff its score is below the route's threshold (``policies.decision``). Score edges are the
distinct deciles of the model's finite scores on every row; an invalid answer (score ``-inf``)
counts in the first bin, as the gateway counts a missing score.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from calibration.runs import RunsMatrix
from policies.score_distribution import DEFAULT_BIN_COUNT, bin_counts, decile_edges


class _Route(Protocol):
    @property
    def weight(self) -> float: ...
    @property
    def models(self) -> Sequence[str]: ...
    @property
    def thresholds(self) -> Sequence[float]: ...


class _Routed(Protocol):
    @property
    def routes(self) -> Sequence[Any]: ...


def shift_reference_document(
    matrix: RunsMatrix, tiers: Mapping[str, _Routed], bin_count: int = DEFAULT_BIN_COUNT
) -> dict[str, Any] | None:
    """The ``shift_reference`` field for these tiers (``TierSolution`` or policy ``Tier``), or None
    when no tier has one scored first stage."""
    if matrix.n_queries == 0:
        return None
    documents = {}
    for name, tier in tiers.items():
        document = tier_reference(matrix, tier.routes, bin_count)
        if document is not None:
            documents[name] = document
    if not documents:
        return None
    return {"calibration_rows": matrix.n_queries, "tiers": documents}


def tier_reference(
    matrix: RunsMatrix, routes: Sequence[_Route], bin_count: int = DEFAULT_BIN_COUNT
) -> dict[str, Any] | None:
    """One tier's reference (the module docstring), or None when its routes do not qualify."""
    models = {r.models[0] for r in routes}
    if len(models) != 1 or any(len(r.models) != 2 or len(r.thresholds) != 1 for r in routes):
        return None
    model = models.pop()
    scores = matrix.score[:, matrix.model_index(model)]
    finite = scores[np.isfinite(scores)]
    edges = decile_edges(finite if finite.size else np.zeros(1), bin_count)
    counts = bin_counts(edges, scores)
    escalated = sum(route.weight * float(np.sum(scores < route.thresholds[0])) for route in routes)
    return {
        "model": model,
        "score": {"edges": edges, "counts": [float(c) for c in counts]},
        "escalation": [float(scores.size - escalated), float(escalated)],
    }
