"""Random stratified calibration/test splits for held-out evaluation.

A split is a pair of sorted row-index arrays ``(calibration_rows, test_rows)`` into the queries of
a :class:`calibration.runs.RunsMatrix`. Within every stratum (e.g. the ``dataset`` column) a
``test_fraction`` share of the rows goes to test, so a mixed-dataset runs table keeps its mix on
both halves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Split:
    """One calibration/test split: sorted int index arrays into the query rows."""

    calibration: np.ndarray
    test: np.ndarray


def stratified_splits(
    n_rows: int,
    *,
    n_splits: int,
    test_fraction: float = 0.5,
    seed: int = 0,
    strata: np.ndarray | None = None,
) -> list[Split]:
    """``n_splits`` random splits of ``n_rows`` rows, stratified by ``strata`` (shape ``(n_rows,)``).

    In each stratum of size m, ``round(test_fraction * m)`` rows go to test, the rest to
    calibration. ``test_fraction == 0`` gives in-sample "splits": every row is both calibration
    and test (the same array object), which reproduces the in-sample envelope. Deterministic in
    ``seed``; split i uses the i-th child of ``numpy.random.SeedSequence(seed)``.
    """
    if n_splits < 1:
        raise ValueError(f"n_splits must be at least 1, got {n_splits}")
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    if n_rows < 2:
        raise ValueError(f"need at least 2 rows to split, got {n_rows}")
    everything = np.arange(n_rows)
    if test_fraction == 0.0:
        return [Split(everything, everything) for _ in range(n_splits)]

    groups = _strata_groups(n_rows, strata)
    splits = []
    for child in np.random.SeedSequence(seed).spawn(n_splits):
        rng = np.random.default_rng(child)
        is_test = np.zeros(n_rows, dtype=bool)
        for members in groups:
            n_test = round(test_fraction * members.size)
            is_test[rng.choice(members, size=n_test, replace=False)] = True
        if is_test.all() or not is_test.any():
            raise ValueError(f"test_fraction {test_fraction} leaves one half empty with {n_rows} rows")
        splits.append(Split(np.flatnonzero(~is_test), np.flatnonzero(is_test)))
    return splits


def _strata_groups(n_rows: int, strata: np.ndarray | None) -> list[np.ndarray]:
    """Row indices of each stratum (one group of all rows without strata)."""
    if strata is None:
        return [np.arange(n_rows)]
    labels = np.asarray(strata)
    if labels.shape != (n_rows,):
        raise ValueError(f"strata must have shape ({n_rows},), got {labels.shape}")
    _, codes = np.unique(labels.astype(str), return_inverse=True)
    order = np.argsort(codes, kind="stable")
    boundaries = np.flatnonzero(np.diff(codes[order])) + 1
    return np.split(order, boundaries)
