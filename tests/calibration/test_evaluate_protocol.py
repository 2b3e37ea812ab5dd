"""Held-out protocol: splits, budget choice, and that selection never sees test rows."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from synthetic_runs import random_matrix

from calibration.envelope import compute_envelope
from calibration.evaluation.budget import choose_within_budget, compact_choices
from calibration.evaluation.chains import chain_outcomes
from calibration.evaluation.heldout import envelope_split_curve, hull_split_curve
from calibration.evaluation.protocol import EvaluationSettings, cost_grid, endpoints, run_evaluation
from calibration.evaluation.routes import route_outcomes
from calibration.frontier import chain_metrics
from calibration.splits import Split, stratified_splits

# --- splits -------------------------------------------------------------------------------------


def test_splits_partition_rows_and_keep_each_stratum_half_and_half() -> None:
    strata = np.array(["a"] * 40 + ["b"] * 160)
    for split in stratified_splits(200, n_splits=5, test_fraction=0.5, seed=3, strata=strata):
        assert np.intersect1d(split.calibration, split.test).size == 0
        assert np.array_equal(np.union1d(split.calibration, split.test), np.arange(200))
        assert (strata[split.test] == "a").sum() == 20
        assert (strata[split.test] == "b").sum() == 80


def test_splits_are_deterministic_in_the_seed_and_differ_between_splits() -> None:
    first = stratified_splits(100, n_splits=3, seed=7)
    again = stratified_splits(100, n_splits=3, seed=7)
    other = stratified_splits(100, n_splits=3, seed=8)
    assert all(np.array_equal(a.test, b.test) for a, b in zip(first, again, strict=True))
    assert not np.array_equal(first[0].test, first[1].test)
    assert not np.array_equal(first[0].test, other[0].test)


def test_test_fraction_zero_makes_calibration_and_test_the_same_rows() -> None:
    (split,) = stratified_splits(10, n_splits=1, test_fraction=0.0)
    assert split.calibration is split.test and np.array_equal(split.test, np.arange(10))


@pytest.mark.parametrize("fraction", [-0.1, 1.0])
def test_rejects_a_test_fraction_outside_zero_to_one(fraction: float) -> None:
    with pytest.raises(ValueError, match="test_fraction"):
        stratified_splits(10, n_splits=1, test_fraction=fraction)


# --- budget choice ------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 20), st.integers(0, 10)), min_size=1, max_size=25),
    st.lists(st.integers(0, 22), min_size=1, max_size=10),
)
def test_budget_choice_is_the_best_calibration_quality_within_budget(points, budgets) -> None:
    cost = np.array([c for c, _ in points], dtype=float)
    quality = np.array([q for _, q in points], dtype=float)
    grid = np.array(budgets, dtype=float)
    chosen = choose_within_budget(cost, quality, grid)
    for g, index in zip(grid, chosen, strict=True):
        fits = np.flatnonzero(cost <= g)
        if fits.size == 0:
            assert index == -1
            continue
        best = quality[fits].max()
        assert quality[index] == best and cost[index] <= g
        assert cost[index] == cost[fits][quality[fits] == best].min()  # ties go to the cheaper


def test_compact_choices_maps_the_grid_onto_distinct_choices() -> None:
    unique, remapped = compact_choices(np.array([-1, -1, 4, 4, 2, 7]))
    assert unique.tolist() == [2, 4, 7]
    assert remapped.tolist() == [-1, -1, 1, 1, 0, 2]


# --- route evaluation agrees with the single-route reference ------------------------------------


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_vectorized_chain_outcomes_match_chain_metrics(stages: int) -> None:
    matrix = random_matrix(n=300, k=4, seed=stages, varying_cost=True)
    models = matrix.models[:stages]
    rng = np.random.default_rng(stages)
    thresholds = rng.uniform(0.1, 0.9, (7, stages - 1))
    columns = list(range(stages))
    cost, quality, escalated = chain_outcomes(
        matrix.score[:, columns], matrix.cost[:, columns], matrix.quality[:, columns], thresholds
    )
    routes = [(tuple(models), tuple(row)) for row in thresholds]
    rows = np.arange(0, 300, 2)
    route_cost, route_quality = route_outcomes(matrix, routes, rows)
    for t, row in enumerate(thresholds):
        expected = chain_metrics(matrix, models, list(row))
        assert cost[t] == pytest.approx(expected[0], rel=1e-12)
        assert quality[t] == pytest.approx(expected[1], abs=1e-12)
        assert escalated[t] == pytest.approx(expected[2], abs=1e-12)
        on_rows = chain_metrics(matrix, models, list(row), rows=rows)
        assert route_cost[t] == pytest.approx(on_rows[0], rel=1e-12)
        assert route_quality[t] == pytest.approx(on_rows[1], abs=1e-12)


# --- held-out properties ------------------------------------------------------------------------


def test_in_sample_split_reproduces_the_in_sample_envelope() -> None:
    matrix = random_matrix(n=500, k=5, seed=1)
    grid = cost_grid(matrix.cost.mean(axis=0), 200)
    everything = np.arange(matrix.n_queries)
    curve = envelope_split_curve(matrix, Split(everything, everything), grid)
    envelope = compute_envelope(matrix)
    position = np.searchsorted(envelope.cost, grid * (1 + 1e-9), side="right") - 1
    np.testing.assert_allclose(curve.quality, envelope.quality[position], atol=1e-12)
    np.testing.assert_allclose(curve.cost, envelope.cost[position], rtol=1e-12)


def test_in_sample_hull_mixtures_interpolate_the_hull_and_dominate_the_envelope() -> None:
    matrix = random_matrix(n=500, k=5, seed=2)
    grid = cost_grid(matrix.cost.mean(axis=0), 300)
    everything = np.arange(matrix.n_queries)
    split = Split(everything, everything)
    hull = hull_split_curve(matrix, split, grid)
    deterministic = envelope_split_curve(matrix, split, grid)
    assert np.all(hull.quality >= deterministic.quality - 1e-12)
    assert np.any(hull.quality > deterministic.quality + 1e-6)
    envelope = compute_envelope(matrix)
    vertices = envelope.hull
    inside = grid <= envelope.cost[vertices[-1]]
    expected = np.interp(grid[inside], envelope.cost[vertices], envelope.quality[vertices])
    np.testing.assert_allclose(hull.quality[inside], expected, atol=1e-12)
    np.testing.assert_allclose(hull.cost[inside], grid[inside], rtol=1e-9)  # spends the budget exactly


ALL_METHODS = (
    "envelope",
    "envelope_hull",
    "single",
    "fixed_chain",
    "subsequence_nsga2",
    "subsequence_random",
    "router",
)


def test_selection_never_sees_test_rows_for_any_method() -> None:
    """Scrambling test-row quality changes held-out quality but not the chosen routes.

    The test-half cost of a chosen route depends only on the route and the test rows' scores and
    costs, so identical test-cost curves mean identical choices on every split and budget.
    """
    matrix = random_matrix(n=400, k=4, seed=5, strata=True, features=True)
    evaluation = EvaluationSettings(splits=3, seed=11, trials=40, methods=ALL_METHODS, grid_points=60)
    original = run_evaluation(matrix, evaluation)
    test_rows = [
        split.test for split in stratified_splits(matrix.n_queries, n_splits=3, seed=11, strata=matrix.strata)
    ]
    rng = np.random.default_rng(2)
    # One split at a time: scramble that split's test rows, compare that split's curves.
    for index, rows in enumerate(test_rows):
        quality = matrix.quality.copy()
        quality[rows] = rng.integers(0, 2, (rows.size, quality.shape[1]))
        changed = run_evaluation(replace(matrix, quality=quality), evaluation)
        for name in ALL_METHODS:
            before, after = original.methods[name], changed.methods[name]
            np.testing.assert_array_equal(before.cost[index], after.cost[index], err_msg=name)
            assert not np.allclose(before.quality[index], after.quality[index], equal_nan=True), name


def test_endpoints_are_the_cheapest_and_the_best_model() -> None:
    cost = np.array([1.0, 1.0, 2.0, 3.0])
    quality = np.array([0.3, 0.4, 0.9, 0.9])
    assert endpoints(cost, quality) == (1, 2)
