"""The policy's ``score_distribution``: where each scored model's scores fell on the calibration rows.

The gateway compares live scores with it (the drift metric, docs/contracts.md#metrics). A model is
scored when it is a non-final stage of some tier's route; its bin edges are the distinct deciles
of its scores on every calibration row, and per tier the expected bin shares are those of the
rows that reach it in that tier: all rows for a first stage, the rows the previous stages
escalated for a later one, routes of a mixture weighted by their weight. That is the population
whose scores the gateway observes live in that tier. Edges come from finite scores only; a
structurally invalid answer (score ``-inf``, ``calibration.runs``) counts in the first bin.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from calibration.runs import RunsMatrix
from calibration.tiers import TierSolution
from policies.score_distribution import DEFAULT_BIN_COUNT, bin_counts, decile_edges


def score_distribution_document(
    matrix: RunsMatrix, tiers: Mapping[str, TierSolution], bin_count: int = DEFAULT_BIN_COUNT
) -> dict[str, Any] | None:
    """The ``score_distribution`` field for these tiers, or None when no tier has a scored stage."""
    scored = sorted({m for s in tiers.values() for r in s.routes for m in r.models[:-1]})
    if not scored or matrix.n_queries == 0:
        return None
    edges = {m: _edges(matrix.score[:, matrix.model_index(m)], bin_count) for m in scored}
    models = {}
    for m in scored:
        all_rows = bin_counts(edges[m], matrix.score[:, matrix.model_index(m)])
        models[m] = {"edges": edges[m], "proportions": _shares(all_rows)}
    tier_bins: dict[str, dict[str, list[float]]] = {}
    for name, solution in tiers.items():
        weighted: dict[str, np.ndarray] = {}
        for route in solution.routes:
            reached = np.ones(matrix.n_queries, dtype=bool)
            for model, threshold in zip(route.models[:-1], route.thresholds, strict=True):
                scores = matrix.score[:, matrix.model_index(model)]
                counts = bin_counts(edges[model], scores[reached], route.weight)
                weighted[model] = weighted.get(model, 0) + counts
                # Stage i escalates iff score < thresholds[i] (policies.decision).
                reached &= scores < threshold
        shares = {m: _shares(c) for m, c in weighted.items() if c.sum() > 0}
        if shares:
            tier_bins[name] = shares
    return {"calibration_rows": matrix.n_queries, "models": models, "tiers": tier_bins}


def _edges(scores: np.ndarray, bin_count: int) -> list[float]:
    finite = scores[np.isfinite(scores)]
    return decile_edges(finite if finite.size else np.zeros(1), bin_count)


def _shares(counts: np.ndarray) -> list[float]:
    return [float(v) for v in counts / counts.sum()]


def set_cascaded_bins(
    document: dict[str, Any] | None, matrix: RunsMatrix, tier: str, model: str, rows: np.ndarray
) -> dict[str, Any]:
    """``document`` (a ``score_distribution`` field, None: a new one) with tier ``tier``'s expected
    bins of ``model`` taken from ``rows`` only: a route-then-cascade tier's cheap model scores just
    the queries its router sends to the cascade, so that is the population the gateway observes."""
    models: dict[str, Any] = {} if document is None else dict(document["models"])
    tiers: dict[str, Any] = {} if document is None else dict(document["tiers"])
    column = matrix.score[:, matrix.model_index(model)]
    if model not in models:
        edges = _edges(column, DEFAULT_BIN_COUNT)
        models[model] = {"edges": edges, "proportions": _shares(bin_counts(edges, column))}
    counts = bin_counts(models[model]["edges"], column[rows])
    if counts.sum() > 0:
        tiers[tier] = {model: _shares(counts)}
    else:
        tiers.pop(tier, None)
    return {"calibration_rows": matrix.n_queries, **(document or {}), "models": models, "tiers": tiers}
