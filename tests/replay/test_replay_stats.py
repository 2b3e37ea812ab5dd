"""Intervals and expectations of ``cascade replay`` (replay.stats, replay.report)."""

from __future__ import annotations

import copy

import pytest

from policies import build_policy
from replay.report import expectation_for
from replay.run import Arm
from replay.stats import (
    Estimate,
    bootstrap_mean_interval,
    mean_estimate,
    percentile,
    wilson_interval,
)
from tests.support.gateway_testkit import POLICY_DOCUMENT


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [  # Newcombe (1998), Statistics in Medicine 17:857, table I, method 3 (Wilson score)
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
    ],
)
def test_wilson_interval_matches_published_values(successes, n, low, high):
    assert wilson_interval(successes, n, 0.95) == (
        pytest.approx(low, abs=5e-5),
        pytest.approx(high, abs=5e-5),
    )


def test_wilson_interval_ends_exactly_at_zero_and_one():
    assert wilson_interval(0, 10)[0] == 0.0
    assert wilson_interval(10, 10)[1] == 1.0
    assert wilson_interval(5, 10, 0.99)[0] < wilson_interval(5, 10, 0.95)[0]  # wider at higher confidence


def test_bootstrap_interval_brackets_the_mean_narrows_with_n_and_is_reproducible():
    small = [0.0, 1.0, 2.0, 3.0, 4.0] * 4
    large = small * 25
    low, high = bootstrap_mean_interval(small)
    assert low < 2.0 < high
    large_low, large_high = bootstrap_mean_interval(large)
    assert large_high - large_low < (high - low) / 3  # about 1/sqrt(25) as wide
    assert bootstrap_mean_interval(small) == (low, high)
    assert bootstrap_mean_interval([0.25] * 7) == (0.25, 0.25)


def test_mean_estimate_picks_wilson_for_rates_and_bootstrap_otherwise():
    assert mean_estimate([1.0, 0.0, 1.0], 0.95).method == "wilson"
    fractional = mean_estimate([0.5, 1.0, 0.0, 0.25], 0.95, expected=0.4)
    assert (fractional.method, fractional.realized, fractional.outside) == ("bootstrap", 0.4375, False)
    assert mean_estimate([], 0.95, expected=0.5).outside is None


def test_outside_tolerates_float_noise_but_not_a_real_difference():
    exact = Estimate(0.001, 0.001, 0.001, "bootstrap", expected=0.001 * (1 + 1e-12))
    assert exact.outside is False
    assert Estimate(0.001, 0.001, 0.001, "bootstrap", expected=0.0011).outside is True
    assert Estimate(0.5, 0.4, 0.6, "wilson").outside is None


def test_percentile_interpolates():
    assert percentile([10.0, 20.0, 30.0, 40.0], 50) == 25.0
    assert percentile([], 95) is None


def test_expectations_come_from_the_tier_or_the_envelope_point_the_gateway_would_pick():
    policy = build_policy(copy.deepcopy(POLICY_DOCUMENT))
    mix = expectation_for(policy, Arm(tier="mix"))
    assert mix is not None and mix.source == "tiers.mix.expected"
    assert mix.route == "0.5 x (small -> large @ 0.5) + 0.5 x (large)"
    assert (mix.cost_usd, mix.quality, mix.escalation_rate) == (0.0007, 0.75, 0.2)
    assert expectation_for(policy, Arm(tier="nosuch")) is None
    between = expectation_for(policy, Arm(max_cost_usd=0.0009))  # points at 1e-5, 4e-4, 1e-3
    assert between is not None and (between.source, between.quality, between.within_budget) == (
        "envelope[1]",
        0.7,
        True,
    )
    exact = expectation_for(policy, Arm(max_cost_usd=0.001))
    assert exact is not None and exact.source == "envelope[2]"

    no_envelope = build_policy({**copy.deepcopy(POLICY_DOCUMENT), "envelope": []})
    fallback = expectation_for(no_envelope, Arm(max_cost_usd=1.0))
    assert fallback is not None and fallback.source == "tiers.balanced.expected (no envelope)"
