"""Held-out curves of the pairwise envelope and of the best single model, one split at a time."""

from __future__ import annotations

import numpy as np

from calibration.envelope import Envelope, compute_envelope
from calibration.evaluation.budget import SplitCurve
from calibration.evaluation.candidates import Candidates, heldout_curve, single_model_candidates
from calibration.runs import RunsMatrix
from calibration.splits import Split


def envelope_candidates(envelope: Envelope) -> Candidates:
    """The envelope's deterministic routes with their (calibration) cost and quality."""
    routes = [(tuple(models), tuple(thresholds)) for models, thresholds in
              zip(envelope.models, envelope.thresholds, strict=True)]
    return Candidates(routes, envelope.cost, envelope.quality)


def envelope_split_curve(matrix: RunsMatrix, split: Split, grid: np.ndarray) -> SplitCurve:
    """Envelope computed on the split's calibration rows, each budget's route scored on its test rows.

    ``grid``: (G,) budgets, USD per query. For budget g the route is the envelope point with the
    highest calibration quality among those with calibration cost <= g; the curve holds that
    route's mean quality and mean cost on the test rows (NaN below the cheapest point).
    """
    envelope = compute_envelope(matrix, rows=split.calibration)
    return heldout_curve(matrix, envelope_candidates(envelope), split.test, grid)


def single_model_split_curve(matrix: RunsMatrix, split: Split, grid: np.ndarray) -> SplitCurve:
    """No cascade: for each budget the best single model on calibration, scored on test."""
    return heldout_curve(matrix, single_model_candidates(matrix, split.calibration), split.test, grid)
