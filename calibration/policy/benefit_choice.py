"""Per tier, the ``escalation_benefit`` scorer in place of the section's, where it wins held out
(``cascade calibrate --benefit-scorer``; docs/calibrate.md#the-benefit-scorer).

A tier whose cascade is one two-stage route, cheap -> strong, is a candidate. On every held-out
split of ``calibration.heldout_expected`` (the same splits), the benefit procedure runs on the
calibration part exactly as it would be served: the benefit model (``calibration.benefit_fit``)
fitted for the pair on that part, the threshold chosen on that part's cross-fitted scores (a
threshold chosen on in-sample scores would flatter the fit) by solving the tier's objective on the
pair's envelope, then the route measured on the test part with the model fitted on the whole
calibration part. The section's tier is measured on the same splits, so each split compares the
two. The benefit scorer wins a ``max_cost_usd`` tier when its held-out mean cost stays within the
budget (or the section's own held-out mean cost, when that overruns) and its quality gain is
positive on at least 97.5% of the splits (the gain's 2.5th percentile above 0); a ``min_quality``
tier when its held-out mean quality reaches the target and its cost saving is positive on at least
97.5% of the splits. Anything less, a tie included, keeps the section's scorer: a choice made on
the larger of two noisy means would switch scorers on noise (with no signal in the features, a
synthetic tier's higher mean went to the benefit scorer; tests/calibration/test_benefit_choice.py).

A tier that takes it serves the pair with the benefit model fitted on the rows its route is chosen
on (every query; the selection part when bounds are certified, ``calibration.bounds``), its
threshold chosen on their cross-fitted scores; its bounds are certified on the certification part
with that model's scores. Its shift reference is of its own scores; it gets no drift bins (the
drift metric compares a model's scores on the section scorer's bins).

Not candidates: tiers served by a router, randomized mixtures, chains of three or more, a section
scored by a black-box scorer or under a prefix commit rule (the features are of whole answers).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from calibration.benefit_fit import (
    BenefitFitError,
    benefit_document,
    crossfit_scores,
    escalation_helps,
    fit_benefit,
)
from calibration.bounds import BoundSettings, certify, route_outcomes, worst_case_cost
from calibration.envelope import compute_envelope
from calibration.heldout_expected import (
    HeldoutSettings,
    heldout_document,
    protocol_splits,
    route_outcome,
    solve_or_best,
    split_outcomes,
)
from calibration.policy.shift_reference import tier_reference
from calibration.runs import RunsMatrix
from calibration.splits import stratified_splits
from calibration.tiers import TierObjective, TierSolution, TiersSpec
from policies.benefit import BenefitModel

SCORER = "escalation_benefit"


@dataclass(frozen=True)
class BenefitSettings:
    """``cascade calibrate --benefit-scorer``: the top-K of the features (the section's), the
    folds of the cross-fitted scores and their seed."""

    top_k: int = 15
    folds: int = 5
    seed: int = 0


@dataclass(frozen=True)
class BenefitChoice:
    """One tier's outcome: ``chosen``, the candidate ``pair``, both procedures' held-out mean cost and
    quality (``compared``, keyed ``section`` and ``escalation_benefit``), or why it was no candidate
    (``note``)."""

    chosen: bool
    pair: tuple[str, str] | None = None
    compared: Mapping[str, Mapping[str, float]] | None = None
    note: str | None = None


def pair_matrix(matrix: RunsMatrix, cheap: str, strong: str) -> RunsMatrix:
    """The runs of two models only, ``cheap`` first."""
    columns = [matrix.model_index(cheap), matrix.model_index(strong)]
    features = None if matrix.answer_features is None else dict(matrix.answer_features)
    return replace(
        matrix,
        models=(cheap, strong),
        quality=matrix.quality[:, columns],
        cost=matrix.cost[:, columns],
        score=matrix.score[:, columns],
        answer_features=features,
    )


def benefit_scores(
    pair: RunsMatrix, fit_rows: np.ndarray, score_rows: np.ndarray, settings: BenefitSettings
) -> tuple[np.ndarray, BenefitModel, np.ndarray]:
    """The pair's score matrix with the cheap column replaced: cross-fitted on ``fit_rows``, by the
    model fitted on all of them on ``score_rows`` (disjoint from them); -inf elsewhere and for an
    answer without a score (always escalated). Also that model and the labels it was fitted on.

    Raises BenefitFitError when ``fit_rows`` cannot fit a model.
    """
    assert pair.answer_features is not None
    features = pair.answer_features[pair.models[0]]
    scoreable = np.isfinite(pair.score[:, 0]) & np.isfinite(features).all(axis=1)
    helps = escalation_helps(pair.quality, 0, 1)
    fit_rows = fit_rows[scoreable[fit_rows]]
    model = fit_benefit(features[fit_rows], helps[fit_rows])
    score = pair.score.copy()
    score[:, 0] = -np.inf
    crossfit = crossfit_scores(features[fit_rows], helps[fit_rows], folds=settings.folds, seed=settings.seed)
    score[fit_rows, 0] = np.where(np.isfinite(crossfit), crossfit, -np.inf)
    rows = score_rows[scoreable[score_rows]]
    score[rows, 0] = [model.from_features(features[row]) for row in rows]
    return score, model, helps[fit_rows]


def choose_benefit_scorers(
    document: dict[str, Any],
    matrix: RunsMatrix,
    spec: TiersSpec,
    heldout: HeldoutSettings,
    settings: BenefitSettings,
    *,
    bounds: BoundSettings | None = None,
    skip: Collection[str] = (),
    randomize: bool = False,
) -> dict[str, BenefitChoice]:
    """Each tier's choice (module docstring); a tier that takes the benefit scorer is rewritten in
    the policy ``document`` (in place). ``skip``: tiers served by a router; ``randomize``: how the
    section's tiers were solved."""
    reason = _no_candidates(matrix)
    splits = protocol_splits(matrix, heldout)
    section = None if reason else split_outcomes(matrix, spec, splits, randomize)
    choices = {}
    split_scores: dict[tuple[str, str], list[np.ndarray | None]] = {}  # per pair: each split's scores
    for name, objective in spec.tiers.items():
        pair = None if reason else _pair(document["tiers"][name])
        why = reason or ("served by a router" if name in skip else None)
        if why is None and pair is None:
            why = "not one two-stage cascade route"
        if why is not None or pair is None or section is None:
            choices[name] = BenefitChoice(False, pair, note=why)
            continue
        two = pair_matrix(matrix, *pair)
        if pair not in split_scores:
            split_scores[pair] = [_scores_or_none(two, split, settings) for split in splits]
        outcomes = np.array(
            [
                _split_outcome(two, objective, split, score)
                for split, score in zip(splits, split_scores[pair], strict=True)
            ]
        )
        chosen = _wins(section[name], outcomes, objective)
        if chosen:
            chosen = _serve(
                document, name, two, objective, heldout_document(outcomes, heldout), settings, bounds
            )
        compared = {"section": _means(section[name]), SCORER: _means(outcomes)}
        choices[name] = BenefitChoice(chosen, pair, compared)
    return choices


def _wins(section: np.ndarray, benefit: np.ndarray, objective: TierObjective) -> bool:
    """Whether the benefit procedure beats the section's on the same splits (module docstring)."""
    kept = np.isfinite(benefit).all(axis=1)
    if not kept.any():
        return False
    section, benefit = section[kept], benefit[kept]
    if objective.max_cost_usd is not None:
        ceiling = max(objective.max_cost_usd, float(section[:, 0].mean())) * (1 + 1e-9)
        gain = benefit[:, 1] - section[:, 1]
        return float(benefit[:, 0].mean()) <= ceiling and float(np.percentile(gain, 2.5)) > 0
    assert objective.min_quality is not None
    saving = section[:, 0] - benefit[:, 0]
    return float(benefit[:, 1].mean()) >= objective.min_quality and float(np.percentile(saving, 2.5)) > 0


def _no_candidates(matrix: RunsMatrix) -> str | None:
    if matrix.answer_features is None:
        return "no answer features (the runs have no logprobs column)"
    if matrix.scoring_cost is not None:
        return f"the section is scored by the black-box scorer {matrix.scorer}"
    if matrix.commit is not None:
        return "the section decides streams on prefixes; the benefit features are of whole answers"
    return None


def _pair(tier: Mapping[str, Any]) -> tuple[str, str] | None:
    routes = tier["routes"]
    if tier.get("routing") is not None or len(routes) != 1 or len(routes[0]["models"]) != 2:
        return None
    cheap, strong = routes[0]["models"]
    return str(cheap), str(strong)


def _means(outcomes: np.ndarray) -> dict[str, float]:
    """Held-out mean cost and quality over the splits that have them."""
    kept = outcomes[np.isfinite(outcomes).all(axis=1)]
    return {"cost_usd": float(kept[:, 0].mean()), "quality": float(kept[:, 1].mean())}


def _scores_or_none(two: RunsMatrix, split: Any, settings: BenefitSettings) -> np.ndarray | None:
    """The pair's scores on one split (``benefit_scores``); None when its calibration part cannot
    fit a model."""
    try:
        return benefit_scores(two, split.calibration, split.test, settings)[0]
    except BenefitFitError:
        return None


def _split_outcome(
    two: RunsMatrix, objective: TierObjective, split: Any, score: np.ndarray | None
) -> np.ndarray:
    """(cost, quality, escalation rate) on the split's test part of the benefit procedure chosen on
    its calibration part; NaN without a model."""
    if score is None:
        return np.full(3, np.nan)
    scored = replace(two, score=score)
    solution = solve_or_best(compute_envelope(scored, rows=split.calibration), objective, False, "tier")
    return np.asarray(route_outcome(scored, solution, split.test), dtype=float)


def _serve(
    document: dict[str, Any],
    name: str,
    two: RunsMatrix,
    objective: TierObjective,
    held: dict[str, Any],
    settings: BenefitSettings,
    bounds: BoundSettings | None,
) -> bool:
    """Rewrite tier ``name`` of ``document`` to serve the benefit scorer (module docstring); False
    (nothing changed) when the rows cannot fit a model or the pair's route at the objective does
    not cascade."""
    everything = np.arange(two.n_queries)
    split = None
    if bounds is not None:
        split = stratified_splits(
            two.n_queries, n_splits=1, test_fraction=bounds.test_fraction, seed=bounds.seed, strata=two.strata
        )[0]
    chosen_on = everything if split is None else split.calibration
    try:
        score, model, helps = benefit_scores(two, chosen_on, np.empty(0, dtype=np.int64), settings)
    except BenefitFitError:
        return False
    choosing = replace(two, score=score)
    solution = solve_or_best(compute_envelope(choosing, rows=chosen_on), objective, False, name)
    if all(len(route.models) != 2 for route in solution.routes):
        return False
    served = replace(two, score=_served_scores(two, model, score))
    tier = document["tiers"][name]
    tier["routes"] = [
        {"weight": r.weight, "models": list(r.models), "thresholds": list(r.thresholds)}
        for r in solution.routes
    ]
    tier["scorer"] = {
        "name": SCORER,
        "top_k": settings.top_k,
        "benefit": benefit_document(model, two.models[0], two.models[1], helps),
    }
    tier["expected"] = _expected(served, solution, held, objective, bounds, split)
    _reference(document, served, name, solution)
    return True


def _served_scores(two: RunsMatrix, model: BenefitModel, score: np.ndarray) -> np.ndarray:
    """The cheap column as the served model scores every row (the gateway's scores)."""
    assert two.answer_features is not None
    features = two.answer_features[two.models[0]]
    served = score.copy()
    rows = np.flatnonzero(np.isfinite(two.score[:, 0]) & np.isfinite(features).all(axis=1))
    served[rows, 0] = [model.from_features(features[row]) for row in rows]
    return served


def _expected(
    served: RunsMatrix,
    solution: TierSolution,
    held: dict[str, Any],
    objective: TierObjective,
    bounds: BoundSettings | None,
    split: Any,
) -> dict[str, Any]:
    whole = route_outcomes(served, solution, np.arange(served.n_queries))
    expected: dict[str, Any] = {
        "cost_usd": float(whole.cost.mean()),
        "quality": min(1.0, max(0.0, float(whole.quality.mean()))),
        "escalation_rate": min(1.0, max(0.0, float(whole.escalated.mean()))),
        "heldout": held,
    }
    if bounds is not None:
        expected["bounds"] = certify(
            route_outcomes(served, solution, split.test),
            worst_case_cost(served, solution),
            objective,
            bounds,
            selection_n=int(split.calibration.size),
            total_n=served.n_queries,
        )
    return expected


def _reference(document: dict[str, Any], served: RunsMatrix, name: str, solution: TierSolution) -> None:
    """The tier's shift reference of its own scores; its drift bins dropped (module docstring)."""
    reference = tier_reference(served, solution.routes)
    shift = document.setdefault("shift_reference", {"calibration_rows": served.n_queries, "tiers": {}})
    if reference is None:
        shift["tiers"].pop(name, None)
    else:
        shift["tiers"][name] = reference
    if not shift["tiers"]:
        document.pop("shift_reference")
    distribution = document.get("score_distribution")
    if distribution is not None:
        distribution["tiers"].pop(name, None)
