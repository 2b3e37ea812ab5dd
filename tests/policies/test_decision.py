"""The decision rule: tier or budget -> route, score -> accept or escalate.

Contracts: docs/contracts.md#policy-file and #choosing-the-route.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any

import pytest

from policies import UnknownTierError, build_policy
from policies.decision import (
    choose_for_budget,
    choose_for_tier,
    draw_route,
    should_escalate,
    tier_for,
)
from policies.schema import Policy, Route


@pytest.fixture
def policy(policy_document: dict[str, Any]) -> Policy:
    return build_policy(policy_document)


# --- tiers -------------------------------------------------------------------------------------


def test_no_tier_resolves_to_the_default_tier(policy: Policy) -> None:
    name, tier = tier_for(policy, None)
    assert name == "balanced"
    assert tier is policy.tiers["balanced"]
    choice = choose_for_tier(policy, None)
    assert (choice.tier, choice.route.models, choice.within_budget) == ("balanced", ["small", "large"], True)


def test_named_tier_resolves_to_that_tier(policy: Policy) -> None:
    name, tier = tier_for(policy, "economy")
    assert name == "economy" and tier is policy.tiers["economy"]


def test_unknown_tier_raises_with_the_known_tiers(policy: Policy) -> None:
    with pytest.raises(UnknownTierError, match="'premium'") as raised:
        choose_for_tier(policy, "premium")
    assert raised.value.tier == "premium"
    assert sorted(raised.value.known) == ["balanced", "economy"]
    assert "balanced, economy" in str(raised.value)


# --- numeric budget ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "models"),
    [
        (0.0001, ["small"]),  # exactly the cheapest point's cost is affordable
        (0.0004999, ["small"]),
        (0.0005, ["small", "large"]),
        (0.0009, ["small", "large"]),
        (0.001, ["large"]),
        (1.0, ["large"]),
    ],
)
def test_budget_picks_the_best_affordable_envelope_point(
    policy: Policy, budget: float, models: list[str]
) -> None:
    choice = choose_for_budget(policy, budget)
    assert choice.route.models == models
    assert choice.within_budget is True
    assert choice.tier == "budget"
    assert choice.route.weight == 1.0


def test_budget_route_carries_the_envelope_point_thresholds(policy: Policy) -> None:
    assert choose_for_budget(policy, 0.0006).route.thresholds == [0.4]


@pytest.mark.parametrize("budget", [0.0, 0.00009, -1.0, math.nan])
def test_budget_below_every_point_serves_the_cheapest_flagged_out_of_budget(
    policy: Policy, budget: float
) -> None:
    choice = choose_for_budget(policy, budget)
    assert choice.route.models == ["small"]
    assert choice.within_budget is False


def test_budget_prefers_quality_over_cost_order_on_a_non_monotone_envelope(
    policy_document: dict[str, Any],
) -> None:
    # The schema only guarantees cost order: a dearer but worse point must not be chosen.
    policy_document["envelope"].insert(
        2, {"cost_usd": 0.0008, "quality": 0.6, "models": ["large", "small"], "thresholds": [0.9]}
    )
    choice = choose_for_budget(build_policy(policy_document), 0.0009)
    assert choice.route.models == ["small", "large"]


def test_budget_on_equal_quality_picks_the_cheaper_point(policy_document: dict[str, Any]) -> None:
    policy_document["envelope"].insert(
        2, {"cost_usd": 0.0008, "quality": 0.7, "models": ["large", "small"], "thresholds": [0.9]}
    )
    assert choose_for_budget(build_policy(policy_document), 0.0009).route.models == ["small", "large"]


def test_policy_without_envelope_serves_the_default_tier_for_a_budget(
    policy_document: dict[str, Any],
) -> None:
    policy_document["envelope"] = []
    choice = choose_for_budget(build_policy(policy_document), 0.0001)
    assert choice.tier == "balanced"
    assert choice.route.models == ["small", "large"]


# --- randomized mixtures -----------------------------------------------------------------------


def test_draw_route_frequencies_match_the_weights(policy: Policy) -> None:
    routes = policy.tiers["economy"].routes  # weights 0.25 / 0.75
    draws = 20_000
    rng = random.Random(20261122)
    counts = Counter(id(draw_route(routes, rng)) for _ in range(draws))
    for route in routes:
        share = counts[id(route)] / draws
        sigma = math.sqrt(route.weight * (1 - route.weight) / draws)
        assert abs(share - route.weight) < 5 * sigma, (route.weight, share)


def test_draw_route_with_three_routes_follows_each_weight() -> None:
    routes = [
        Route(weight=0.2, models=["a"]),
        Route(weight=0.5, models=["b"]),
        Route(weight=0.3, models=["c"]),
    ]
    draws = 30_000
    rng = random.Random(7)
    counts = Counter(draw_route(routes, rng).models[0] for _ in range(draws))
    for route in routes:
        sigma = math.sqrt(route.weight * (1 - route.weight) / draws)
        assert abs(counts[route.models[0]] / draws - route.weight) < 5 * sigma


def test_draw_route_is_reproducible_with_a_seeded_rng(policy: Policy) -> None:
    routes = policy.tiers["economy"].routes
    first = [draw_route(routes, random.Random(3)).models for _ in range(50)]
    again = [draw_route(routes, random.Random(3)).models for _ in range(50)]
    assert first == again


def test_single_route_tier_does_not_consume_randomness(policy: Policy) -> None:
    rng = random.Random(11)
    state = rng.getstate()
    assert draw_route(policy.tiers["balanced"].routes, rng) is policy.tiers["balanced"].routes[0]
    assert rng.getstate() == state


def test_choose_for_tier_draws_among_mixture_routes(policy: Policy) -> None:
    rng = random.Random(5)
    seen = {tuple(choose_for_tier(policy, "economy", rng).route.models) for _ in range(200)}
    assert seen == {("small",), ("small", "large")}


# --- escalation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("score", "threshold", "escalate"),
    [
        (0.39, 0.4, True),
        (0.4, 0.4, False),  # strict: a score equal to the threshold is accepted
        (0.41, 0.4, False),
        (-math.inf, 0.0, True),
        (0.0, 0.0, False),
        (1.0, 1.0, False),
    ],
)
def test_escalates_iff_score_is_strictly_below_threshold(
    score: float, threshold: float, escalate: bool
) -> None:
    for rule in ("escalate", "accept"):
        assert should_escalate(score, threshold, rule) is escalate


@pytest.mark.parametrize(("rule", "escalate"), [("escalate", True), ("accept", False)])
def test_missing_score_follows_the_policy_rule(rule: str, escalate: bool) -> None:
    assert should_escalate(None, 0.4, rule) is escalate
    assert should_escalate(None, -math.inf, rule) is escalate


def test_policy_default_on_missing_score_is_escalate(policy: Policy) -> None:
    assert policy.on_missing_score == "escalate"
    assert should_escalate(None, 0.4, policy.on_missing_score) is True
