"""Per-query outcomes of a policy's tiers: what the policy file promises, query by query."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from synthetic_runs import random_matrix

from calibration.evaluation.chains import chain_outcomes
from calibration.frontier import chain_per_query
from calibration.policy.calibrate import calibrate
from calibration.recalibration.outcomes import PolicyOutcomeError, policy_outcomes
from calibration.tiers import parse_tiers
from policies.schema import Route

TIERS = parse_tiers(
    {
        "default_tier": "mid",
        "tiers": {
            "low": {"max_cost_usd": 2e-5},
            "mid": {"max_cost_usd": 4e-5},
            "top": {"min_quality": 0.7},
        },
    }
)


@pytest.mark.parametrize("randomize", [False, True])
def test_on_its_calibration_rows_a_policy_does_exactly_what_it_expects(randomize: bool) -> None:
    matrix = replace(
        random_matrix(600, k=4, seed=3, varying_cost=True), scorer="mean_token_negentropy", top_k=15
    )
    rows = np.arange(0, 600, 2)
    policy = calibrate(matrix, TIERS, rows=rows, randomize=randomize).policy
    if randomize:
        assert any(len(tier.routes) == 2 for tier in policy.tiers.values())  # mixtures are exercised
    outcomes = policy_outcomes(policy, matrix, rows)
    for name, tier in policy.tiers.items():
        assert outcomes[name].cost.mean() == pytest.approx(tier.expected.cost_usd, rel=1e-9)
        assert outcomes[name].quality.mean() == pytest.approx(tier.expected.quality, abs=1e-12)
        assert outcomes[name].escalated.mean() == pytest.approx(tier.expected.escalation_rate, abs=1e-12)


def test_per_query_chain_agrees_with_the_vectorized_chain_means() -> None:
    matrix = random_matrix(300, k=4, seed=8, varying_cost=True)
    thresholds = np.array([[0.3, 0.5, 0.4], [0.6, 0.2, 0.9], [0.0, 0.0, 0.0], [1.1, 1.1, 1.1]])
    means = chain_outcomes(matrix.score, matrix.cost, matrix.quality, thresholds)
    for t, vector in enumerate(thresholds):
        cost, quality, escalated = chain_per_query(matrix.score, matrix.cost, matrix.quality, vector)
        assert (cost.mean(), quality.mean(), escalated.mean()) == pytest.approx(
            (means[0][t], means[1][t], means[2][t])
        )


def test_a_policy_routing_to_a_model_the_runs_lack_is_named() -> None:
    matrix = replace(random_matrix(200, k=3, seed=1), scorer="mean_token_negentropy", top_k=15)
    policy = calibrate(matrix, TIERS.__class__("mid", {"mid": TIERS.tiers["mid"]})).policy
    fewer = replace(matrix, models=("m0", "m1", "other"))
    with pytest.raises(PolicyOutcomeError, match="routes to m2, which the traffic has no rows for"):
        policy_outcomes(policy, fewer, np.arange(200))


def test_a_fallback_tier_is_its_first_model_on_recorded_rows() -> None:
    matrix = replace(random_matrix(200, k=3, seed=2), scorer="mean_token_negentropy", top_k=15)
    policy = calibrate(matrix, TIERS.__class__("mid", {"mid": TIERS.tiers["mid"]})).policy
    mid = policy.tiers["mid"]
    fallback = mid.model_copy(update={"mechanism": "fallback", "routes": [Route(models=["m0", "m2"])]})
    policy = policy.model_copy(update={"tiers": {"mid": fallback}})
    rows = np.arange(200)

    outcome = policy_outcomes(policy, matrix, rows)["mid"]

    assert outcome.cost == pytest.approx(matrix.cost[rows, matrix.model_index("m0")])
    assert outcome.quality == pytest.approx(matrix.quality[rows, matrix.model_index("m0")])
    assert not outcome.escalated.any()
