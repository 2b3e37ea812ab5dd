"""Fitting the ``escalation_benefit`` scorer (``policies.benefit``) on per-query runs.

For one pair (the scored model, the model it escalates to) the label of a query is "escalation
helps": the stronger model's grade above the scored one's. ``fit_benefit`` fits a logistic
regression (L2, standardized features; Newton's method) and an isotonic map (pool adjacent
violators) of its score to P(escalation does not help) on the given queries; ``crossfit_scores``
gives every query the score of a model fitted without it (k folds), which is what an AUROC or a
threshold may be judged on held out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from calibration.runs import RunsMatrix
from calibration.runs_columns import LOGPROBS_COLUMN
from policies.benefit import FEATURES, BenefitModel, answer_features

# L2 strength of the logistic regression (as sklearn's C: larger = weaker): the runs hold a few
# hundred queries per pair, so the fit is kept smooth.
_C = 0.5


class BenefitFitError(ValueError):
    """The queries cannot fit a benefit model (one label only, or too few queries)."""


def escalation_helps(quality: np.ndarray, scored: int, escalated_to: int) -> np.ndarray:
    """(n,) bool: the model escalated to is graded above the scored model."""
    return np.asarray(quality[:, escalated_to] > quality[:, scored])


def fit_benefit(features: np.ndarray, helps: np.ndarray) -> BenefitModel:
    """The benefit model of ``features`` (n, len(FEATURES)) for the labels ``helps`` (n,).

    Raises BenefitFitError when both labels do not occur at least twice.
    """
    features = np.asarray(features, dtype=float)
    helps = np.asarray(helps, dtype=bool)
    if features.ndim != 2 or features.shape[1] != len(FEATURES):
        raise BenefitFitError(f"expected (n, {len(FEATURES)}) features, got {features.shape}")
    positives = int(helps.sum())
    if positives < 2 or helps.shape[0] - positives < 2:
        raise BenefitFitError(
            f"escalation helps on {positives} of {helps.shape[0]} queries: both outcomes must occur twice"
        )
    mean = features.mean(axis=0)
    scale = features.std(axis=0)
    scale = np.where(scale > 1e-12, scale, 1.0)
    standardized = (features - mean) / scale
    coefficients, intercept = _logistic(standardized, helps.astype(float))
    linear = -(standardized @ coefficients + intercept)
    knots_x, knots_y = _isotonic_knots(linear, (~helps).astype(float))
    return BenefitModel(
        mean=tuple(float(v) for v in mean),
        scale=tuple(float(v) for v in scale),
        coefficients=tuple(float(v) for v in coefficients),
        intercept=float(intercept),
        knots_x=knots_x,
        knots_y=knots_y,
    )


def _logistic(features: np.ndarray, labels: np.ndarray, iterations: int = 100) -> tuple[np.ndarray, float]:
    """L2-regularized logistic regression (``0.5 |w|^2 + _C * log loss``, the intercept not
    penalized) by Newton's method: (coefficients, intercept). A few hundred rows of a few features
    converge in a handful of steps, far faster than a general solver's setup per fit."""
    rows, width = features.shape
    design = np.hstack([features, np.ones((rows, 1))])
    penalty = np.r_[np.full(width, 1.0 / _C), 0.0]
    weights = np.zeros(width + 1)
    for _ in range(iterations):
        probability = 1.0 / (1.0 + np.exp(-np.clip(design @ weights, -35.0, 35.0)))
        gradient = design.T @ (probability - labels) + penalty * weights
        curvature = (design.T * (probability * (1.0 - probability))) @ design + np.diag(penalty + 1e-9)
        step = np.linalg.solve(curvature, gradient)
        weights -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    return weights[:width], float(weights[width])


def _isotonic_knots(linear: np.ndarray, kept: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The non-decreasing least-squares fit of ``kept`` (1: escalation did not help) on ``linear``
    (pool adjacent violators; equal scores pooled first) as its blocks' (mean score, value), values
    squeezed into [1e-6, 1 - 1e-6] so the tails still order answers (``BenefitModel``)."""
    values, inverse, counts = np.unique(linear, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=kept)
    blocks: list[list[float]] = []  # [sum of kept, count, sum of scores] per block
    for value, total, count in zip(values, sums, counts, strict=True):
        blocks.append([float(total), float(count), float(value) * float(count)])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] >= blocks[-1][0] / blocks[-1][1]:
            last = blocks.pop()
            blocks[-1] = [a + b for a, b in zip(blocks[-1], last, strict=True)]
    centres = [score / count for _, count, score in blocks]
    fitted = [1e-6 + (1 - 2e-6) * total / count for total, count, _ in blocks]
    if len(blocks) == 1:  # one block: a flat map over the fitted range
        low, high = float(values[0]), float(values[-1])
        centres, fitted = [low, max(high, low + 1e-9)], [fitted[0], fitted[0] + 1e-9]
    return tuple(centres), tuple(fitted)


def crossfit_scores(
    features: np.ndarray, helps: np.ndarray, *, folds: int = 5, seed: int = 0, fold: np.ndarray | None = None
) -> np.ndarray:
    """(n,) each query's benefit score from a model fitted on the other folds; NaN for a query
    whose training folds cannot fit a model. ``fold``: each query's fold (default: ``folds``
    folds drawn per label with ``seed``, so each holds both labels in proportion)."""
    features = np.asarray(features, dtype=float)
    helps = np.asarray(helps, dtype=bool)
    if fold is None:
        rng = np.random.default_rng(seed)
        fold = np.empty(helps.shape[0], dtype=np.int64)
        for label in (False, True):
            members = np.flatnonzero(helps == label)
            fold[rng.permutation(members)] = np.arange(members.shape[0]) % folds
    scores = np.full(helps.shape[0], np.nan)
    for k in np.unique(fold):
        test = fold == k
        try:
            model = fit_benefit(features[~test], helps[~test])
        except BenefitFitError:
            continue
        scores[test] = [model.from_features(row) for row in features[test]]
    return scores


def answer_feature_tables(
    path: Path,
    query_ids: np.ndarray,
    models: Sequence[str],
    top_k: int,
    where: Mapping[str, str] | None = None,
) -> dict[str, np.ndarray]:
    """Per model of ``models``, (n, len(FEATURES)) the features of its answer to each of
    ``query_ids`` from the runs file's ``logprobs`` column (``policies.benefit.answer_features``),
    the file read once; a row of NaN where the answer has no usable logprobs (or no row)."""
    import orjson

    from calibration.table_io import read_columns

    columns = read_columns(path, {"query_id", "model", LOGPROBS_COLUMN}, dict(where or {}))
    position = {str(query): index for index, query in enumerate(query_ids)}
    tables = {model: np.full((len(query_ids), len(FEATURES)), np.nan) for model in models}
    values, missing = columns.values, columns.missing
    if LOGPROBS_COLUMN not in values:
        return tables
    row_models = values["model"].astype(str)
    for row in np.flatnonzero(np.isin(row_models, list(models)) & ~missing[LOGPROBS_COLUMN]):
        index = position.get(str(values["query_id"][row]))
        if index is None:
            continue
        content = values[LOGPROBS_COLUMN][row]
        if isinstance(content, str | bytes):
            content = orjson.loads(content)
        if isinstance(content, Mapping):
            content = content.get("content")
        found = answer_features(content if isinstance(content, list) else None, top_k)
        if found is not None:
            tables[row_models[row]][index] = found
    return tables


def benefit_document(
    model: BenefitModel, scored: str, escalates_to: str, helps: np.ndarray
) -> dict[str, Any]:
    """The policy's ``ScorerSpec.benefit`` (``policies.benefit_schema.BenefitSpec``) of ``model``,
    fitted for ``scored`` -> ``escalates_to`` on queries labelled ``helps``."""
    return {
        "scored": scored,
        "escalates_to": escalates_to,
        "features": list(FEATURES),
        "mean": list(model.mean),
        "scale": list(model.scale),
        "coefficients": list(model.coefficients),
        "intercept": model.intercept,
        "knots_x": list(model.knots_x),
        "knots_y": list(model.knots_y),
        "fitted_on": int(helps.shape[0]),
        "helps": int(np.sum(helps)),
    }


def with_answer_features(
    path: Path, matrices: Mapping[str, RunsMatrix], top_k: int, where: Mapping[str, str] | None = None
) -> dict[str, RunsMatrix]:
    """``matrices`` (per request kind) carrying their models' answer features
    (``RunsMatrix.answer_features``, from the runs file's ``logprobs``), but the costliest's."""
    # The costliest model (models are ordered by mean cost) is never a cascade's cheap stage.
    return {
        kind: replace(
            matrix,
            answer_features=answer_feature_tables(path, matrix.query_ids, matrix.models[:-1], top_k, where),
        )
        for kind, matrix in matrices.items()
    }
