"""The policy's shift_reference as calibration writes it (calibration.policy.shift_reference): per
two-stage tier, the cheap stage's score histogram and the escalations of every calibration row."""

from __future__ import annotations

import numpy as np
from synthetic_runs import random_matrix

from calibration.envelope import compute_envelope
from calibration.policy.policy_writer import build_calibrated_policy
from calibration.tiers import TierObjective, solve_tier
from policies.score_distribution import decile_edges


def test_each_two_stage_tier_gets_its_cheap_scores_and_escalations_over_every_row() -> None:
    matrix = random_matrix(n=400, k=3, seed=5)
    envelope = compute_envelope(matrix)
    costs = np.sort(envelope.cost)
    budgets = {"low": float(costs[0]), "mid": float(np.median(costs)), "high": float(costs[-1])}
    tiers = {n: solve_tier(envelope, TierObjective(max_cost_usd=b), name=n) for n, b in budgets.items()}
    policy = build_calibrated_policy(matrix, envelope, tiers, "mid")
    reference = policy.shift_reference
    assert reference is not None and reference.calibration_rows == 400
    two_stage = {n for n, t in policy.tiers.items() if all(len(r.models) == 2 for r in t.routes)}
    assert two_stage and set(reference.tiers) == two_stage
    for name in two_stage:
        (route,) = policy.tiers[name].routes
        tier = reference.tiers[name]
        scores = matrix.score[:, matrix.model_index(route.models[0])]
        assert tier.model == route.models[0] and tier.score.edges == decile_edges(scores)
        expected = np.bincount(np.searchsorted(tier.score.edges, scores, side="right"), minlength=10)
        assert tier.score.counts == [float(c) for c in expected[: len(tier.score.counts)]]
        escalated = float(np.sum(scores < route.thresholds[0]))
        assert tier.escalation == [400.0 - escalated, escalated]
