"""Diagnostics of a model pool (docs/evaluate.md, Diagnostics).

* Escalation benefit m_H(s) - m_L(s) of each pair (L, H): the mean quality gain from escalating
  queries whose cheap-model score is s. Estimated by equal-count bins of s_L (edges from all
  rows), per split on the test rows, then the median and 10th-90th percentile band over splits.
  Expected-dominance fraction = share of bins where the median benefit is > 0 (escalating there
  helps on average); decreasing-benefit fraction = share of steps between neighbouring bins
  where it does not increase (the paper's condition for a concave pair frontier).
* Spearman correlation between s_L and C_H per pair: the frontier slope formula assumes the
  expensive model's cost does not depend on the cheap model's score. NaN when either is
  constant (e.g. per-query prices), where independence holds trivially.
* AUROC of each model's score against its correctness (quality >= 0.5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from calibration.envelope import candidate_pairs, dominated_models
from calibration.metrics import median_curve, percentile_band
from calibration.runs import RunsMatrix

N_BINS = 20


@dataclass(frozen=True)
class BenefitCurve:
    """Escalation benefit on score bins: all arrays ``(B,)``; NaN where a bin had no test rows."""

    score: np.ndarray  # median cheap-model score of each bin (all rows)
    quantile: np.ndarray  # the bin's middle as a quantile of the cheap-model score (all rows)
    median: np.ndarray
    low: np.ndarray  # 10th percentile over splits
    high: np.ndarray  # 90th percentile over splits
    dominance_fraction: float
    decreasing_fraction: float


@dataclass(frozen=True)
class PairDiagnostics:
    """Diagnostics of the cascade ``low -> high``."""

    low: str
    high: str
    benefit: BenefitCurve
    spearman_score_cost: float


def auroc(score: np.ndarray, correct: np.ndarray) -> float:
    """Area under the ROC curve of ``score`` (n,) for ``correct`` (n,) bool; ties count one half.

    Mann-Whitney form via average ranks, O(n log n). NaN when only one class is present.
    """
    from scipy.stats import rankdata

    correct = np.asarray(correct, dtype=bool)
    n_pos = int(correct.sum())
    n_neg = correct.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(np.asarray(score, dtype=np.float64))
    return float((ranks[correct].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation of two (n,) arrays; NaN if either is constant."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    from scipy.stats import rankdata

    return float(np.corrcoef(rankdata(x), rankdata(y))[0, 1])


def score_bins(score: np.ndarray, n_bins: int = N_BINS) -> tuple[np.ndarray, int]:
    """Equal-count bins of ``score`` (n,): ``(bin index (n,), bin count B)``; tied edges merge.

    Edges come from the finite scores; a ``-inf`` score (an invalid answer) falls in the first bin.
    """
    finite = score[np.isfinite(score)]
    edges = np.unique(np.quantile(finite if finite.size else np.zeros(1), np.linspace(0.0, 1.0, n_bins + 1)))
    inner = edges[1:-1]
    return np.searchsorted(inner, score, side="right"), inner.size + 1


def benefit_fractions(curve: np.ndarray) -> tuple[float, float]:
    """(dominance fraction, decreasing fraction) of a benefit curve, ignoring undefined bins."""
    defined = curve[np.isfinite(curve)]
    if defined.size == 0:
        return float("nan"), float("nan")
    dominance = float(np.mean(defined > 0))
    steps = np.diff(defined)
    decreasing = float(np.mean(steps <= 0)) if steps.size else float("nan")
    return dominance, decreasing


def escalation_benefit(
    score_l: np.ndarray,
    quality_l: np.ndarray,
    quality_h: np.ndarray,
    row_sets: Sequence[np.ndarray],
    n_bins: int = N_BINS,
) -> BenefitCurve:
    """Binned m_H(s) - m_L(s) over ``row_sets`` (e.g. each split's test rows; one set = no band)."""
    bins, n_used = score_bins(score_l, n_bins)
    benefit = np.asarray(quality_h, dtype=np.float64) - np.asarray(quality_l, dtype=np.float64)
    curves = np.full((len(row_sets), n_used), np.nan)
    for index, rows in enumerate(row_sets):
        counts = np.bincount(bins[rows], minlength=n_used)
        sums = np.bincount(bins[rows], weights=benefit[rows], minlength=n_used)
        with np.errstate(invalid="ignore", divide="ignore"):
            curves[index] = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    median = median_curve(curves)
    low, high = percentile_band(curves)
    centers = np.array([np.median(score_l[bins == b]) for b in range(n_used)])
    sizes = np.bincount(bins, minlength=n_used)
    quantiles = (np.cumsum(sizes) - sizes / 2) / sizes.sum()
    dominance, decreasing = benefit_fractions(median)
    return BenefitCurve(centers, quantiles, median, low, high, dominance, decreasing)


def pool_pairs(matrix: RunsMatrix) -> list[tuple[int, int]]:
    """Cost-ordered (L, H) column pairs of the full-data pool with a_H > a_L (as the envelope)."""
    cost = matrix.cost.mean(axis=0)
    quality = matrix.quality.mean(axis=0)
    return candidate_pairs(quality, ~dominated_models(cost, quality))


def pair_diagnostics(
    matrix: RunsMatrix, row_sets: Sequence[np.ndarray] | None = None, n_bins: int = N_BINS
) -> list[PairDiagnostics]:
    """Escalation benefit and cost-score independence of every pool pair.

    ``row_sets``: the rows each benefit estimate uses (default: all rows, a single estimate).
    """
    sets = list(row_sets) if row_sets else [np.arange(matrix.n_queries)]
    out = []
    for low, high in pool_pairs(matrix):
        curve = escalation_benefit(
            matrix.score[:, low], matrix.quality[:, low], matrix.quality[:, high], sets, n_bins
        )
        out.append(
            PairDiagnostics(
                matrix.models[low],
                matrix.models[high],
                curve,
                spearman(matrix.score[:, low], matrix.cost[:, high]),
            )
        )
    return out


def model_auroc(matrix: RunsMatrix) -> dict[str, float]:
    """AUROC of each model's score against its correctness (quality >= 0.5), all rows."""
    return {
        name: auroc(matrix.score[:, j], matrix.quality[:, j] >= 0.5) for j, name in enumerate(matrix.models)
    }
