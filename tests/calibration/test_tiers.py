"""Tiers: budget (P2) and min-quality (P1) objectives, deterministic and randomized."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runs_factory import four_model_example, make_matrix

from calibration.envelope import compute_envelope
from calibration.tiers import (
    TierObjective,
    TiersError,
    UnreachableTierError,
    load_tiers,
    shadow_price_at,
    solve_tier,
)

# Hand-made envelope: A (1, 0.5), A->B @ 0.2 (1.5, 0.75), B->C @ 0.5 (4.5, 1.0); all hull vertices.
ENVELOPE = compute_envelope(four_model_example())


def budget(value: float) -> TierObjective:
    return TierObjective(max_cost_usd=value)


def quality(value: float) -> TierObjective:
    return TierObjective(min_quality=value)


def test_budget_tier_takes_the_best_point_within_budget() -> None:
    solution = solve_tier(ENVELOPE, budget(4.0))
    assert [(r.weight, r.models, r.thresholds) for r in solution.routes] == [(1.0, ("A", "B"), (0.2,))]
    assert (solution.cost, solution.quality, solution.escalation_rate) == pytest.approx((1.5, 0.75, 0.25))
    assert solution.warning is None


def test_budget_exactly_at_a_point_takes_that_point() -> None:
    assert solve_tier(ENVELOPE, budget(1.5)).routes[0].models == ("A", "B")


def test_shadow_price_is_the_hull_slope_to_the_right_of_the_point() -> None:
    assert solve_tier(ENVELOPE, budget(1.2)).shadow_price == pytest.approx(0.25 / 0.5)
    assert solve_tier(ENVELOPE, budget(4.0)).shadow_price == pytest.approx(0.25 / 3.0)
    assert solve_tier(ENVELOPE, budget(100)).shadow_price is None  # top of the envelope
    assert shadow_price_at(ENVELOPE, 0.5) is None  # below the cheapest point


def test_budget_below_the_cheapest_route_serves_the_cheapest_with_a_warning() -> None:
    solution = solve_tier(ENVELOPE, budget(0.5), name="tiny", randomize=True)
    assert solution.routes[0].models == ("A",)
    assert solution.cost == 1.0
    assert solution.warning is not None
    assert "tiny" in solution.warning and "below the cheapest" in solution.warning
    assert solution.shadow_price is None


def test_min_quality_tier_takes_the_cheapest_point_reaching_it() -> None:
    solution = solve_tier(ENVELOPE, quality(0.9))
    assert solution.routes[0].models == ("B", "C")
    assert (solution.cost, solution.quality) == pytest.approx((4.5, 1.0))


def test_min_quality_below_the_cheapest_point_takes_the_cheapest() -> None:
    assert solve_tier(ENVELOPE, quality(0.1)).routes[0].models == ("A",)


def test_unreachable_min_quality_is_an_error_naming_the_tier_and_best_quality() -> None:
    two_models = make_matrix(["a", "b"], [[1, 0], [1, 0]], [[1, 1], [2, 2]], [[0.5, 0.5], [0.5, 0.5]])
    envelope = compute_envelope(two_models)
    with pytest.raises(UnreachableTierError, match=r"tier 'gold': min_quality 0.9 .*best quality .*0.5000"):
        solve_tier(envelope, quality(0.9), name="gold")


def test_randomized_budget_tier_mixes_adjacent_hull_vertices_to_spend_the_budget_exactly() -> None:
    solution = solve_tier(ENVELOPE, budget(1.2), randomize=True)
    assert [r.models for r in solution.routes] == [("A",), ("A", "B")]
    assert [r.weight for r in solution.routes] == pytest.approx([0.6, 0.4])
    assert solution.cost == pytest.approx(1.2)
    assert solution.quality == pytest.approx(0.5 + 0.4 * 0.25)
    assert solution.escalation_rate == pytest.approx(0.4 * 0.25)
    assert solution.shadow_price == pytest.approx(0.5)


def test_randomized_min_quality_tier_reaches_the_target_exactly_at_least_cost() -> None:
    solution = solve_tier(ENVELOPE, quality(0.9), randomize=True)
    assert [r.models for r in solution.routes] == [("A", "B"), ("B", "C")]
    assert [r.weight for r in solution.routes] == pytest.approx([0.4, 0.6])
    assert solution.quality == pytest.approx(0.9)
    assert solution.cost == pytest.approx(1.5 + 0.6 * 3.0)
    assert solution.cost < solve_tier(ENVELOPE, quality(0.9)).cost


def test_randomized_budget_above_the_top_takes_the_best_point() -> None:
    solution = solve_tier(ENVELOPE, budget(50), randomize=True)
    assert len(solution.routes) == 1 and solution.routes[0].models == ("B", "C")


@settings(max_examples=200, deadline=None)
@given(st.floats(1.0, 4.5, allow_nan=False))
def test_randomized_budget_weights_sum_to_one_and_expected_cost_equals_budget(value: float) -> None:
    solution = solve_tier(ENVELOPE, budget(value), randomize=True)
    weights = np.array([r.weight for r in solution.routes])
    assert weights.sum() == pytest.approx(1.0) and np.all(weights > 0)
    points = [r.envelope_index for r in solution.routes]
    assert float(weights @ ENVELOPE.cost[points]) == pytest.approx(value)
    assert solution.cost == pytest.approx(value)
    # A mixture on the hull is never worse than the best deterministic point within budget.
    assert solution.quality >= solve_tier(ENVELOPE, budget(value)).quality - 1e-12


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tiers.yaml"
    path.write_text(text)
    return path


def test_load_tiers_reads_objectives_in_file_order(tmp_path: Path) -> None:
    spec = load_tiers(
        write(tmp_path, "default_tier: b\ntiers:\n  a: {max_cost_usd: 0.001}\n  b: {min_quality: 0.8}\n")
    )
    assert spec.default_tier == "b"
    assert list(spec.tiers) == ["a", "b"]
    assert spec.tiers["a"] == TierObjective(max_cost_usd=0.001)
    assert spec.tiers["b"] == TierObjective(min_quality=0.8)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tiers: {a: {max_cost_usd: 1}}\n", "missing 'default_tier'"),
        ("default_tier: z\ntiers: {a: {max_cost_usd: 1}}\n", "default_tier 'z' is not one of the tiers"),
        ("default_tier: a\ntiers: {a: {max_cost_usd: 1, min_quality: 0.5}}\n", "tiers.a: needs exactly one"),
        ("default_tier: a\ntiers: {a: {max_cost_usd: cheap}}\n", "tiers.a.max_cost_usd: not a number"),
        ("default_tier: a\ntiers: {a: {min_quality: 1.5}}\n", "min_quality: must be in"),
        ("default_tier: a\ntiers: {a: {max_cost_usd: -1}}\n", "must be a finite number >= 0"),
        ("default_tier: a\n", "needs a 'tiers:' mapping"),
        ("default_tier: a\ntiers: {a: {max_cost_usd: 1}}\nextra: 1\n", "unknown top-level key"),
        ("default_tier: [\n", "not valid YAML"),
    ],
)
def test_bad_tiers_file_is_a_one_line_error_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(TiersError) as caught:
        load_tiers(path)
    assert str(path) in str(caught.value) and message in str(caught.value)
    assert "\n" not in str(caught.value)
