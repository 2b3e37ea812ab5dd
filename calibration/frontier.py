"""Exact cost-quality frontier of a two-model cascade, and simulation of k-stage chains.

Two-model cascade (L, H) with threshold tau: each query is sent to L; it escalates to H iff
s_L < tau (strict, as ``policies.decision.should_escalate``). Per query the cost is C_L, plus C_H
when escalated (the cheap call is always paid), and the quality is U_H if escalated else U_L.

Sorting the queries by s_L makes the escalated set at any tau a prefix of that order, so prefix
sums of C_H and (U_H - U_L) give every threshold's expected cost and quality in O(n log n):
no grid, no loop over thresholds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from calibration.runs import RunsMatrix


@dataclass(frozen=True)
class FrontierCurve:
    """Expected cost and quality of a cascade at T thresholds.

    Attributes:
        thresholds: (T,) tau values; escalate iff score < tau.
        cost: (T,) mean cost per query, USD.
        quality: (T,) mean quality in [0, 1].
        escalation_rate: (T,) share of queries escalated to the second model.
    """

    thresholds: np.ndarray
    cost: np.ndarray
    quality: np.ndarray
    escalation_rate: np.ndarray

    def __len__(self) -> int:
        return int(self.thresholds.shape[0])


def frontier_thresholds(score_l: np.ndarray) -> np.ndarray:
    """(T,) every distinct score of L ascending, then one just above the maximum.

    The smallest escalates nothing (no score is below the minimum), the last escalates every
    query; each step in between escalates one more group of tied scores. Only finite scores are
    thresholds: a ``-inf`` score (an answer that failed the structural checks, ``calibration.runs``)
    is below every threshold, so it is always escalated.
    """
    distinct = np.unique(np.asarray(score_l, dtype=np.float64))
    distinct = distinct[np.isfinite(distinct)]
    if distinct.size == 0:
        return np.zeros(1) if np.size(score_l) else distinct  # every score is -inf: escalate all
    return np.append(distinct, np.nextafter(distinct[-1], np.inf))


def pair_frontier(
    score_l: np.ndarray,
    cost_l: np.ndarray,
    quality_l: np.ndarray,
    cost_h: np.ndarray,
    quality_h: np.ndarray,
    saving_l: np.ndarray | None = None,
) -> FrontierCurve:
    """Exact frontier of the cascade L -> H over every distinct threshold.

    Args:
        score_l: (n,) confidence of L per query.
        cost_l, quality_l: (n,) cost (USD) and quality of L per query.
        cost_h, quality_h: (n,) cost (USD) and quality of H per query.
        saving_l: (n,) cost of L not charged when it escalates (a prefix commit rule), or None.

    Returns:
        A FrontierCurve with T = (number of distinct scores) + 1 points, thresholds ascending
        (so cost and escalation rate non-decreasing).
    """
    return pair_metrics_at(
        score_l, cost_l, quality_l, cost_h, quality_h, frontier_thresholds(score_l), saving_l=saving_l
    )


def pair_metrics_at(
    score_l: np.ndarray,
    cost_l: np.ndarray,
    quality_l: np.ndarray,
    cost_h: np.ndarray,
    quality_h: np.ndarray,
    thresholds: np.ndarray | Sequence[float],
    saving_l: np.ndarray | None = None,
) -> FrontierCurve:
    """Expected cost, quality and escalation rate of L -> H at the given thresholds.

    Same arrays as ``pair_frontier`` (all (n,)); ``thresholds`` is (T,) in any order, e.g.
    chosen on calibration rows and evaluated here on held-out rows. An escalated query pays
    ``cost_h`` on top of L's cost, less ``saving_l`` when given.
    """
    score = np.asarray(score_l, dtype=np.float64)
    thresholds = np.asarray(thresholds, dtype=np.float64).reshape(-1)
    n = score.shape[0]
    if n == 0:
        raise ValueError("a frontier needs at least one query")
    order = np.argsort(score, kind="stable")
    sorted_score = score[order]
    gain = np.asarray(quality_h, dtype=np.float64)[order] - np.asarray(quality_l, dtype=np.float64)[order]
    # Prefix sums with a leading 0: entry e = total over the e lowest-scored queries.
    extra = np.asarray(cost_h, dtype=np.float64)[order]
    if saving_l is not None:
        extra = extra - np.asarray(saving_l, dtype=np.float64)[order]
    escalation_cost = np.concatenate(([0.0], np.cumsum(extra)))
    escalation_gain = np.concatenate(([0.0], np.cumsum(gain)))
    escalated = np.searchsorted(sorted_score, thresholds, side="left")  # count of score < tau
    base_cost = float(np.sum(cost_l))
    base_quality = float(np.sum(quality_l))
    return FrontierCurve(
        thresholds=thresholds,
        cost=(base_cost + escalation_cost[escalated]) / n,
        quality=(base_quality + escalation_gain[escalated]) / n,
        escalation_rate=escalated / n,
    )


def chain_per_query(
    score: np.ndarray,
    cost: np.ndarray,
    quality: np.ndarray,
    thresholds: Sequence[float],
    scoring: np.ndarray | None = None,
    saving: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-query outcome of one k-stage chain: ``(cost (n,), quality (n,), escalated (n,) bool)``.

    ``score``, ``cost``, ``quality``: ``(n, k)``, column i = stage i's model. Stage i answers unless
    its score is below ``thresholds[i]`` (strict, as the gateway); the last stage always answers.
    Every called stage is paid, and every non-final stage reached pays ``scoring`` ``(n, k)`` too
    (a black-box scorer's calls; None: free); a stage that escalates is refunded ``saving`` ``(n, k)``
    (a prefix commit rule's cancelled call; None: nothing). ``escalated`` says the query left the
    first stage.
    Vectorized over queries (the loop is over the k stages).
    """
    score = np.asarray(score, dtype=np.float64)
    cost = np.asarray(cost, dtype=np.float64)
    quality = np.asarray(quality, dtype=np.float64)
    n, k = cost.shape
    if len(thresholds) != k - 1:
        raise ValueError(f"a chain of {k} models needs {k - 1} thresholds")
    active = np.ones(n, dtype=bool)  # queries that reach the current stage
    total_cost = np.zeros(n)
    answer = np.zeros(n)
    for stage in range(k):
        total_cost += np.where(active, cost[:, stage], 0.0)
        if stage == k - 1:
            answer = np.where(active, quality[:, stage], answer)
            break
        if scoring is not None:
            total_cost += np.where(active, np.asarray(scoring, dtype=np.float64)[:, stage], 0.0)
        escalate = active & (score[:, stage] < thresholds[stage])
        if saving is not None:
            total_cost -= np.where(escalate, np.asarray(saving, dtype=np.float64)[:, stage], 0.0)
        answer = np.where(active & ~escalate, quality[:, stage], answer)
        active = escalate
    escalated = np.zeros(n, dtype=bool) if k == 1 else score[:, 0] < thresholds[0]
    return total_cost, answer, escalated


def chain_metrics(
    matrix: RunsMatrix,
    models: Sequence[str],
    thresholds: Sequence[float],
    rows: np.ndarray | None = None,
) -> tuple[float, float, float]:
    """Simulate a k-stage chain on the matrix's queries.

    Stage i answers with ``models[i]``; it escalates to stage i + 1 iff its score is below
    ``thresholds[i]``. Every model called is paid for, and every scored stage its scoring cost.

    Args:
        matrix: the runs.
        models: k >= 1 model names (a single model = no cascade).
        thresholds: k - 1 thresholds.
        rows: int index array of the queries to use (default: all).

    Returns:
        (mean cost USD, mean quality, escalation rate = share of queries that left stage 0).
    """
    if len(thresholds) != len(models) - 1:
        raise ValueError(f"a chain of {len(models)} models needs {len(models) - 1} thresholds")
    columns = [matrix.model_index(name) for name in models]
    select = slice(None) if rows is None else np.asarray(rows)
    cost = matrix.cost[select][:, columns]
    if cost.shape[0] == 0:
        raise ValueError("chain_metrics needs at least one query")
    total_cost, answer, escalated = chain_per_query(
        matrix.score[select][:, columns],
        cost,
        matrix.quality[select][:, columns],
        thresholds,
        scoring=matrix.scoring(select, columns),
        saving=matrix.saving(select, columns),
    )
    return float(total_cost.mean()), float(answer.mean()), float(escalated.mean())
