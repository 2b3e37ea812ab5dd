"""Candidate routes measured on calibration rows, and their held-out curve on test rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from calibration.evaluation.budget import (
    SplitCurve,
    choose_within_budget,
    compact_choices,
    curve_from_choices,
)
from calibration.evaluation.routes import Route, route_outcomes
from calibration.runs import RunsMatrix


@dataclass(frozen=True)
class Candidates:
    """Routes a method may choose from, with their calibration outcomes.

    ``routes[i]`` has mean calibration cost ``cost[i]`` (USD per query) and quality
    ``quality[i]``; both arrays are ``(m,)``.
    """

    routes: Sequence[Route]
    cost: np.ndarray
    quality: np.ndarray


def heldout_curve(
    matrix: RunsMatrix, candidates: Candidates, test_rows: np.ndarray, grid: np.ndarray
) -> SplitCurve:
    """Per budget in ``grid`` (G,): choose on calibration outcomes, report the test outcome.

    Only the distinct routes some budget chose are evaluated on ``test_rows``, and the test
    outcome never feeds back into the choice.
    """
    chosen = choose_within_budget(candidates.cost, candidates.quality, grid)
    unique, remapped = compact_choices(chosen)
    if unique.size == 0:
        return SplitCurve.undefined(grid.size)
    test_cost, test_quality = route_outcomes(matrix, [candidates.routes[i] for i in unique], test_rows)
    return curve_from_choices(remapped, test_cost, test_quality)


def single_model_candidates(matrix: RunsMatrix, rows: np.ndarray) -> Candidates:
    """Every model on its own, measured on ``rows`` (the "no cascade" baseline)."""
    routes = [((name,), ()) for name in matrix.models]
    return Candidates(routes, matrix.cost[rows].mean(axis=0), matrix.quality[rows].mean(axis=0))
