"""The ``escalation_benefit`` scorer's policy side: its features, its fitted model's map, the
``ScorerSpec.benefit`` it is carried in, and the rules of a tier with a scorer of its own."""

from __future__ import annotations

import copy
import itertools
import math
from typing import Any

import pytest

from policies import PolicyInvalidError, build_policy, score_logprobs
from policies.benefit import FEATURES, PREFIX_TOKENS, answer_features
from policies.benefit_schema import BenefitSpec
from policies.errors import UnknownScorerError
from policies.kinds import tier_policy
from tests.support.policy_files import policy_document

BENEFIT: dict[str, Any] = {
    "scored": "small",
    "escalates_to": "large",
    "features": list(FEATURES),
    "mean": [0.5] * len(FEATURES),
    "scale": [0.25] * len(FEATURES),
    "coefficients": [-1.0] * len(FEATURES),
    "intercept": 0.2,
    "knots_x": [-2.0, 0.0, 3.0],
    "knots_y": [0.2, 0.5, 0.95],
    "fitted_on": 200,
    "helps": 40,
}


def content(confidences: list[float]) -> list[dict[str, Any]]:
    """Token entries, each chosen at its confidence with three alternatives sharing the rest."""
    entries = []
    for i, p in enumerate(confidences):
        rest = math.log((1 - p) / 3)
        alternatives = [{"token": f"t{i}", "logprob": math.log(p)}] + [
            {"token": f"a{j}", "logprob": rest} for j in range(3)
        ]
        entries.append({"token": f"t{i}", "logprob": math.log(p), "top_logprobs": alternatives})
    return entries


def test_the_features_are_the_scorers_values_the_prefix_and_the_length() -> None:
    answer = content([0.99, 0.6, 0.95, 0.7, 0.99, 0.9, 0.8, 0.99, 0.4, 0.5])
    features = answer_features(answer, 15)
    assert features is not None and len(features) == len(FEATURES)
    named = dict(zip(FEATURES, features, strict=True))
    for scorer in ("mean_token_negentropy", "min_token_negentropy", "min_probability", "mean_logprob"):
        assert named[scorer] == pytest.approx(score_logprobs(answer, scorer, 15))
    prefix = score_logprobs(answer[:PREFIX_TOKENS], "mean_token_negentropy", 15)
    assert named[f"prefix{PREFIX_TOKENS}_mean_token_negentropy"] == pytest.approx(prefix)
    assert named["log_tokens"] == pytest.approx(math.log1p(len(answer)))
    assert answer_features([], 15) is None


def test_the_map_is_a_probability_that_orders_every_answer() -> None:
    model = BenefitSpec(**BENEFIT).model()
    grid = [x / 10 for x in range(-60, 61)]
    values = [model.probability(x) for x in grid]
    assert all(0 <= v <= 1 for v in values)
    assert all(b > a for a, b in itertools.pairwise(values))  # distinct scores, tails too
    assert model.probability(0.0) == pytest.approx(0.5)
    assert model.probability(1.5) == pytest.approx(0.5 + 0.45 * 0.5)
    assert abs(model.probability(-50.0) - 0.2) <= 1.01e-6 and abs(model.probability(50.0) - 0.95) <= 1.01e-6


def test_a_confident_answer_scores_higher_under_this_fit() -> None:
    model = BenefitSpec(**BENEFIT).model()
    sure = score_logprobs(content([0.99] * 6), "escalation_benefit", 15, benefit=model)
    unsure = score_logprobs(content([0.4] * 6), "escalation_benefit", 15, benefit=model)
    assert sure is not None and unsure is not None and sure > unsure


def test_the_scorer_refuses_to_score_without_its_fitted_model() -> None:
    with pytest.raises(UnknownScorerError, match="fitted model"):
        score_logprobs(content([0.9]), "escalation_benefit", 15)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"features": list(reversed(FEATURES))}, "features must be"),
        ({"knots_x": [0.0, 0.0, 1.0]}, "strictly increasing"),
        ({"knots_y": [0.5, 0.4, 0.9]}, "not decrease"),
        ({"scale": [0.0] * len(FEATURES)}, "positive"),
        ({"escalates_to": "small"}, "different models"),
        ({"mean": [0.0]}, "one number per feature"),
    ],
)
def test_a_malformed_fit_is_refused(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BenefitSpec(**{**BENEFIT, **change})


def with_tier_scorer(**tier: Any) -> dict[str, Any]:
    """The test policy whose ``balanced`` tier (small -> large) has the benefit scorer."""
    scorer = {"name": "escalation_benefit", "top_k": 5, "benefit": copy.deepcopy(BENEFIT)}
    return policy_document({"balanced": {"scorer": scorer, **tier}})


def test_a_tier_serves_its_own_scorer_and_the_others_the_sections() -> None:
    policy = build_policy(with_tier_scorer())
    served = tier_policy(policy, "balanced")
    assert served.scorer.name == "escalation_benefit" and served.scorer.benefit_model is not None
    assert tier_policy(policy, "balanced") is served  # built once
    assert tier_policy(policy, "chain") is policy
    assert served.tiers == policy.tiers and served.policy_id == policy.policy_id


def test_a_tier_scorer_fitted_for_another_pair_is_refused() -> None:
    document = with_tier_scorer(routes=[{"weight": 1.0, "models": ["medium", "large"], "thresholds": [0.5]}])
    with pytest.raises(PolicyInvalidError, match="fitted for small -> large"):
        build_policy(document)


def test_the_benefit_scorer_is_not_a_section_scorer() -> None:
    document = policy_document(scorer={"name": "escalation_benefit", "top_k": 5, "benefit": BENEFIT})
    with pytest.raises(PolicyInvalidError, match="a tier's own scorer only"):
        build_policy(document)


def test_a_tier_scorer_refuses_a_prefix_rule_and_its_own_range() -> None:
    with pytest.raises(PolicyInvalidError, match="no prefix commit rule"):
        build_policy(with_tier_scorer(commit={"rule": "prefix", "tokens": 8}))
    outside = with_tier_scorer(routes=[{"weight": 1.0, "models": ["small", "large"], "thresholds": [1.5]}])
    with pytest.raises(PolicyInvalidError, match="range \\[0, 1\\] of scorer escalation_benefit"):
        build_policy(outside)


def test_a_policy_without_tier_scorers_keeps_its_id() -> None:
    plain = build_policy(policy_document())
    document = policy_document()
    for tier in document["tiers"].values():
        tier["scorer"] = None
    assert build_policy(document).policy_id == plain.policy_id
