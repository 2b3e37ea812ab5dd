"""One calibration, as ``cascade calibrate`` runs it: runs matrix + tiers -> envelope, tiers, policy.

``cascade calibrate``, ``cascade recalibrate`` and the label-free study all call ``calibrate`` so
the policy a comparison talks about is the one the command would write. ``cascade calibrate`` also
asks for held-out expectations (``calibration.heldout_expected``) and calibrates each request kind
of the runs this way (``calibration.policy.kinds``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from calibration.bounds import BoundSettings, attach_bounds, certify_tiers, uncertified_note
from calibration.envelope import Envelope, compute_envelope
from calibration.heldout_expected import HeldoutSettings, heldout_expectations
from calibration.policy.benefit_choice import BenefitChoice, BenefitSettings, choose_benefit_scorers
from calibration.policy.policy_writer import policy_document
from calibration.policy.score_distribution import set_cascaded_bins
from calibration.routing.mechanisms import (
    MechanismChoice,
    MechanismCurves,
    RoutingOptions,
    choose_mechanisms,
    router_document,
)
from calibration.runs import RunsMatrix
from calibration.tiers import TierSolution, TiersSpec, solve_tiers
from policies.router import LinearRouter
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
    mechanisms: Mapping[str, MechanismChoice] | None = None
    curves: MechanismCurves | None = None
    bounds: Mapping[str, dict[str, Any]] | None = None
    benefit: Mapping[str, BenefitChoice] | None = None


def calibrate(
    matrix: RunsMatrix,
    spec: TiersSpec,
    *,
    rows: np.ndarray | None = None,
    randomize: bool = False,
    heldout: HeldoutSettings | None = None,
    routing: RoutingOptions | None = None,
    bounds: BoundSettings | None = None,
    benefit: BenefitSettings | None = None,
) -> Calibrated:
    """Calibrate on ``rows`` of the matrix (default: every query); with ``heldout``, also measure
    each tier out of sample over that protocol's splits of those rows; with ``bounds``, certify
    each cascade tier's one-sided bounds (``calibration.bounds``). With ``routing`` (which
    needs ``heldout`` and the matrix's features), each tier may serve a router or route-then-cascade
    instead of its cascade (``calibration.routing.mechanisms``), and the policy carries the router.
    With ``benefit`` (which needs ``heldout`` and the matrix's answer features), a two-stage cascade
    tier may take the ``escalation_benefit`` scorer (``calibration.policy.benefit_choice``).

    Raises ``UnreachableTierError`` (a min_quality above the best route) like ``solve_tiers``.
    """
    data = matrix if rows is None else matrix.subset(rows)
    envelope = compute_envelope(data)
    solutions = solve_tiers(envelope, spec, randomize=randomize)
    expectations = None
    notes: tuple[str, ...] = ()
    certified, solutions, notes = _bounds(data, spec, bounds, randomize, solutions)
    if heldout is not None:
        try:
            expectations = heldout_expectations(data, spec, heldout, randomize=randomize)
        except ValueError as exc:  # too few queries to split: the policy is still valid without
            notes = (*notes, f"no held-out expectations: {exc}")
    document = policy_document(data, envelope, solutions, spec.default_tier, expectations)
    attach_bounds(document["tiers"], certified)
    choices = curves = None
    if routing is not None:
        if heldout is None or expectations is None:
            raise ValueError("choosing a routing mechanism needs held-out expectations (drop --no-heldout)")
        choices, curves = attach_routing(document, data, spec, expectations, routing, heldout)
        # A tier that serves a router no longer serves the cascade its bounds were certified for.
        certified = _cascade_tiers_only(certified, choices)
    benefit_choices = None
    if benefit is not None:
        routed = [name for name, choice in (choices or {}).items() if choice.routing is not None]
        benefit_choices = _choose_benefit(document, data, spec, heldout, benefit, bounds, routed, randomize)
        certified = _with_benefit_bounds(certified, document, benefit_choices)
    lines = [uncertified_note(name, document) for name, document in (certified or {}).items()]
    notes = (*notes, *(line for line in lines if line))
    return Calibrated(
        envelope,
        solutions,
        build_policy(document),
        expectations,
        document,
        notes,
        choices,
        curves,
        certified,
        benefit_choices,
    )


def _choose_benefit(
    document: dict[str, Any],
    data: RunsMatrix,
    spec: TiersSpec,
    heldout: HeldoutSettings | None,
    benefit: BenefitSettings,
    bounds: BoundSettings | None,
    routed: list[str],
    randomize: bool,
) -> dict[str, BenefitChoice]:
    """``choose_benefit_scorers`` on the held-out protocol's splits (ValueError without them)."""
    if heldout is None:
        raise ValueError("choosing the benefit scorer needs held-out splits (drop --no-heldout)")
    return choose_benefit_scorers(
        document, data, spec, heldout, benefit, bounds=bounds, skip=routed, randomize=randomize
    )


def _with_benefit_bounds(
    certified: dict[str, dict[str, Any]] | None,
    document: Mapping[str, Any],
    choices: Mapping[str, BenefitChoice],
) -> dict[str, dict[str, Any]] | None:
    """The tiers' bounds, a tier that took the benefit scorer with those of its new route."""
    if certified is None:
        return None
    updated = dict(certified)
    for name, choice in choices.items():
        if choice.chosen:
            updated[name] = document["tiers"][name]["expected"]["bounds"]
    return updated


def _bounds(
    data: RunsMatrix,
    spec: TiersSpec,
    settings: BoundSettings | None,
    randomize: bool,
    solutions: dict[str, TierSolution],
) -> tuple[dict[str, dict[str, Any]] | None, dict[str, TierSolution], tuple[str, ...]]:
    """Each tier's bounds and the solutions the tiers serve: with bounds, the routes chosen on the
    selection part, which the bounds hold for (each keeping the full-data shadow price); without
    (not asked for, or the queries cannot be split, which a note says), ``solutions``."""
    if settings is None:
        return None, solutions, ()
    try:
        certified = certify_tiers(data, spec, settings, randomize=randomize)
    except ValueError as exc:
        return None, solutions, (f"no bounds: {exc}",)
    served = {
        name: replace(solution, shadow_price=solutions[name].shadow_price)
        for name, solution in certified.solutions.items()
    }
    return certified.bounds, served, ()


def _cascade_tiers_only(
    certified: dict[str, dict[str, Any]] | None, choices: Mapping[str, MechanismChoice]
) -> dict[str, dict[str, Any]] | None:
    if certified is None:
        return None
    return {name: b for name, b in certified.items() if choices[name].routing is None}


def attach_routing(
    document: dict[str, Any],
    matrix: RunsMatrix,
    spec: TiersSpec,
    expectations: Mapping[str, dict[str, Any]],
    routing: RoutingOptions,
    heldout: HeldoutSettings,
) -> tuple[dict[str, MechanismChoice], MechanismCurves]:
    """Choose each tier's mechanism and write the choice into the policy ``document`` (in place):
    the ``router`` when any tier routes, and each such tier's ``routing`` and ``expected``. Returns
    the choices and the mechanisms' in-sample frontiers (for the report)."""
    router, choices, curves = choose_mechanisms(matrix, spec, expectations, routing, heldout)
    routed = {name: choice for name, choice in choices.items() if choice.routing is not None}
    if not routed:
        return choices, curves
    document["router"] = router_document(router, matrix.cost.mean(axis=0).tolist(), routing.components)
    for name, choice in routed.items():
        _hybrid_drift_bins(document, matrix, router, name, choice)
        tier = document["tiers"][name]
        assert choice.expected is not None
        cost, quality, escalation = choice.expected
        tier["routing"] = choice.routing
        tier["expected"] = {
            "cost_usd": float(cost),
            "quality": min(1.0, max(0.0, float(quality))),
            "escalation_rate": min(1.0, max(0.0, float(escalation))),
            "heldout": choice.heldout,
        }
    return choices, curves


def _hybrid_drift_bins(
    document: dict[str, Any], matrix: RunsMatrix, router: LinearRouter, name: str, choice: MechanismChoice
) -> None:
    """A hybrid pair tier's cheap-model score bins for the drift metric, from the queries its
    router sends to the cascade (``calibration.policy.score_distribution.set_cascaded_bins``). Any other
    routed tier keeps its fallback routes' bins: it scores only when it falls back to them."""
    routing = choice.routing or {}
    models = routing.get("models") or []
    if routing.get("mechanism") != "hybrid" or len(models) != 2:
        return
    assert matrix.features is not None
    p_cheap = router.probabilities(matrix.features)[:, router.models.index(models[0])]
    cascaded = np.flatnonzero(~(p_cheap < routing["direct_below"]))  # policies.router.goes_direct
    document["score_distribution"] = set_cascaded_bins(
        document.get("score_distribution"), matrix, name, models[0], cascaded
    )
