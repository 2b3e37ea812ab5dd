"""Vectorized outcomes of one k-stage chain under many threshold vectors at once.

Used by the threshold searches (fixed chain, subsequences), which score hundreds of threshold
vectors per split: one boolean tensor instead of a Python loop per trial. The single-route
reference is ``calibration.frontier.chain_metrics``; tests check the two agree.
"""

from __future__ import annotations

import numpy as np

# Threshold vectors scored together: bounds the (vectors x queries) work array (~40 MB at 10k rows).
_VECTORS_PER_CHUNK = 512


def chain_outcomes(
    score: np.ndarray,
    cost: np.ndarray,
    quality: np.ndarray,
    thresholds: np.ndarray,
    scoring: np.ndarray | None = None,
    saving: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean cost, quality and escalation rate of a chain for each threshold vector.

    ``score``, ``cost``, ``quality``: ``(n, k)``, column i = stage i's model on n queries.
    ``thresholds``: ``(T, k-1)``; stage i escalates a query iff ``score[:, i] < thresholds[t, i]``
    and the last stage always answers. Returns three ``(T,)`` arrays: mean cost (USD per query,
    every called stage paid), mean quality of the answering stage, and the share of queries
    escalated past the first stage. ``scoring`` ``(n, k)``: the cost of scoring each stage's answer
    (a black-box scorer's calls), paid by every non-final stage a query reaches; ``saving``
    ``(n, k)``: what a stage that escalates is not charged (a prefix commit rule's cancelled call).
    """
    score = np.asarray(score, dtype=np.float64)
    cost = np.asarray(cost, dtype=np.float64)
    quality = np.asarray(quality, dtype=np.float64)
    thresholds = np.atleast_2d(np.asarray(thresholds, dtype=np.float64))
    n, k = score.shape
    if thresholds.shape[1] != k - 1:
        raise ValueError(f"a {k}-stage chain needs {k - 1} thresholds per vector, got {thresholds.shape[1]}")
    n_vectors = thresholds.shape[0]
    if n_vectors > _VECTORS_PER_CHUNK:
        parts = [
            chain_outcomes(
                score, cost, quality, thresholds[start : start + _VECTORS_PER_CHUNK], scoring, saving
            )
            for start in range(0, n_vectors, _VECTORS_PER_CHUNK)
        ]
        return tuple(np.concatenate(column) for column in zip(*parts, strict=True))  # type: ignore[return-value]
    if k == 1:
        ones = np.ones(n_vectors)
        return ones * cost[:, 0].mean(), ones * quality[:, 0].mean(), np.zeros(n_vectors)

    # Loop over the k-1 stages (k is small), vectorized over vectors x queries: `alive[t, q]` says
    # query q escalated through every stage so far. Means are linear, so each stage adds its
    # callers' cost and the quality change from the previous stage's answer to its own.
    total_cost = np.full(n_vectors, cost[:, 0].sum())
    total_quality = np.full(n_vectors, quality[:, 0].sum())
    escalated = np.zeros(n_vectors)
    alive = np.ones((n_vectors, n))
    for stage in range(k - 1):
        if scoring is not None:  # this stage is scored for every query that reaches it
            total_cost += np.einsum("tq,q->t", alive, np.asarray(scoring, dtype=np.float64)[:, stage])
        alive *= score[None, :, stage] < thresholds[:, stage, None]
        if saving is not None:  # this stage escalated these queries: its cancelled call is refunded
            total_cost -= np.einsum("tq,q->t", alive, np.asarray(saving, dtype=np.float64)[:, stage])
        # einsum, not `@`: these are matrix-vector products, and a threaded BLAS call waits for
        # its second thread, which costs milliseconds per call when other jobs share the cores.
        total_cost += np.einsum("tq,q->t", alive, cost[:, stage + 1])
        total_quality += np.einsum("tq,q->t", alive, quality[:, stage + 1] - quality[:, stage])
        if stage == 0:
            escalated = alive.sum(axis=1)
    out_cost, out_quality, out_escalated = total_cost / n, total_quality / n, escalated / n
    return out_cost, out_quality, out_escalated
