"""One calibration, as ``cascade calibrate`` runs it: runs matrix + tiers -> envelope, tiers, policy.

``cascade calibrate``, ``cascade recalibrate`` and the label-free study all call ``calibrate`` so
the policy a comparison talks about is the one the command would write. ``cascade calibrate`` also
asks for held-out expectations (``calibration.heldout_expected``) and calibrates each request kind
of the runs this way (``calibration.kinds``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from calibration.envelope import Envelope, compute_envelope
from calibration.heldout_expected import HeldoutSettings, heldout_expectations
from calibration.policy_writer import policy_document
from calibration.runs import RunsMatrix
from calibration.tiers import TierSolution, TiersSpec, solve_tiers
from policies.schema import Policy
from policies.store import build_policy


@dataclass(frozen=True)
class Calibrated:
    """The envelope, the solved tiers (file order) and the validated, stamped policy.

    ``heldout``: each tier's cross-fitted expectations (None when not asked for or when the
    queries cannot be split; ``notes`` says why); ``document``: the policy before it was stamped.
    """

    envelope: Envelope
    solutions: dict[str, TierSolution]
    policy: Policy
    heldout: Mapping[str, dict[str, Any]] | None = None
    document: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def calibrate(
    matrix: RunsMatrix,
    spec: TiersSpec,
    *,
    rows: np.ndarray | None = None,
    randomize: bool = False,
    heldout: HeldoutSettings | None = None,
) -> Calibrated:
    """Calibrate on ``rows`` of the matrix (default: every query); with ``heldout``, also measure
    each tier out of sample over that protocol's splits of those rows.

    Raises ``UnreachableTierError`` (a min_quality above the best route) like ``solve_tiers``.
    """
    data = matrix if rows is None else matrix.subset(rows)
    envelope = compute_envelope(data)
    solutions = solve_tiers(envelope, spec, randomize=randomize)
    expectations = None
    notes: tuple[str, ...] = ()
    if heldout is not None:
        try:
            expectations = heldout_expectations(data, spec, heldout, randomize=randomize)
        except ValueError as exc:  # too few queries to split: the policy is still valid without
            notes = (f"no held-out expectations: {exc}",)
    document = policy_document(data, envelope, solutions, spec.default_tier, expectations)
    return Calibrated(envelope, solutions, build_policy(document), expectations, document, notes)
