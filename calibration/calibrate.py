"""One calibration, as ``cascade calibrate`` runs it: runs matrix + tiers -> envelope, tiers, policy.

``cascade calibrate``, ``cascade recalibrate`` and the label-free study all call ``calibrate`` so
the policy a comparison talks about is the one the command would write.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calibration.envelope import Envelope, compute_envelope
from calibration.policy_writer import build_calibrated_policy
from calibration.runs import RunsMatrix
from calibration.tiers import TierSolution, TiersSpec, solve_tiers
from policies.schema import Policy


@dataclass(frozen=True)
class Calibrated:
    """The envelope, the solved tiers (file order) and the validated, stamped policy."""

    envelope: Envelope
    solutions: dict[str, TierSolution]
    policy: Policy


def calibrate(
    matrix: RunsMatrix, spec: TiersSpec, *, rows: np.ndarray | None = None, randomize: bool = False
) -> Calibrated:
    """Calibrate on ``rows`` of the matrix (default: every query).

    Raises ``UnreachableTierError`` (a min_quality above the best route) like ``solve_tiers``.
    """
    data = matrix if rows is None else matrix.subset(rows)
    envelope = compute_envelope(data)
    solutions = solve_tiers(envelope, spec, randomize=randomize)
    policy = build_calibrated_policy(data, envelope, solutions, spec.default_tier)
    return Calibrated(envelope, solutions, policy)
