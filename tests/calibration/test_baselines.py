"""Baselines on small synthetic data where the answer is known."""

from __future__ import annotations

import numpy as np
import pytest
from synthetic_runs import random_matrix

from calibration.evaluation.fixed_chain import fixed_chain_candidates, fixed_chain_split_curve
from calibration.evaluation.heldout import envelope_split_curve
from calibration.evaluation.protocol import cost_grid
from calibration.evaluation.router import router_split_curve
from calibration.evaluation.search import population_size_for
from calibration.evaluation.subsequence import subsequence_space, subsequence_split_curve
from calibration.routing.routed import lambda_sweep, route_choices
from calibration.runs import RunsMatrix
from calibration.splits import Split, stratified_splits


def _in_sample(matrix: RunsMatrix) -> Split:
    everything = np.arange(matrix.n_queries)
    return Split(everything, everything)


def _oracle_router_matrix(n: int = 400, seed: int = 0) -> RunsMatrix:
    """Cheap model right exactly when feature x = 1; expensive model always right."""
    rng = np.random.default_rng(seed)
    x = (rng.random(n) < 0.6).astype(float)
    return RunsMatrix(
        models=("cheap", "expensive"),
        query_ids=np.array([f"q{i}" for i in range(n)]),
        quality=np.column_stack([x, np.ones(n)]),
        cost=np.tile([1e-5, 1e-4], (n, 1)),
        score=rng.random((n, 2)),  # an uninformative score: no cascade can do this
        features=x[:, None],
    )


def test_router_with_a_perfectly_informative_feature_reaches_the_oracle() -> None:
    matrix = _oracle_router_matrix()
    (split,) = stratified_splits(matrix.n_queries, n_splits=1, seed=4)
    grid = cost_grid(matrix.cost.mean(axis=0), 300)
    curve = router_split_curve(matrix, split, grid)
    test_x = matrix.features[split.test, 0]
    # Oracle on test: cheap where it is right, expensive elsewhere: quality 1 at this cost.
    oracle_cost = 1e-5 * test_x.mean() + 1e-4 * (1 - test_x.mean())
    calibration_oracle = 1e-5 * matrix.features[split.calibration, 0].mean() + 1e-4 * (
        1 - matrix.features[split.calibration, 0].mean()
    )
    reached = grid >= calibration_oracle * (1 + 1e-9)
    assert reached.any()
    np.testing.assert_allclose(curve.quality[reached], 1.0)
    np.testing.assert_allclose(curve.cost[reached], oracle_cost, rtol=1e-12)
    # Below the oracle's cost the router cannot be perfect; the uninformative cascade is far worse.
    assert np.nanmax(curve.quality[~reached]) < 1.0
    cascade = envelope_split_curve(matrix, split, grid)
    at = np.flatnonzero(reached)[0]
    assert cascade.quality[at] < 0.9


def test_router_sweep_spans_argmax_probability_to_cheapest_model() -> None:
    p = np.array([[0.2, 0.9, 0.5], [0.8, 0.1, 0.85]])
    cost = np.array([1e-5, 2e-5, 1e-3])
    lambdas = lambda_sweep(cost)
    choices = route_choices(p, cost, lambdas)
    assert lambdas[0] == 0 and np.all(np.diff(lambdas) > 0)
    assert choices[0].tolist() == [1, 2]  # lambda 0: most likely correct
    assert choices[-1].tolist() == [0, 0]  # highest price: the cheapest model


def test_router_is_refused_without_features() -> None:
    matrix = random_matrix(n=50, k=2)
    with pytest.raises(ValueError, match="feature"):
        router_split_curve(matrix, _in_sample(matrix), cost_grid(matrix.cost.mean(axis=0), 10))


def test_two_model_fixed_chain_approaches_but_never_beats_the_exact_pair_frontier() -> None:
    """With two models the chain is the pair; the exact envelope is the in-sample optimum."""
    matrix = random_matrix(n=600, k=2, seed=3)
    split = _in_sample(matrix)
    grid = cost_grid(matrix.cost.mean(axis=0), 100)
    exact = envelope_split_curve(matrix, split, grid)
    searched = fixed_chain_split_curve(matrix, split, grid, trials=300, seed=0)
    assert np.all(searched.quality <= exact.quality + 1e-12)
    # Only a chain: it always pays the cheap model, so it never offers the expensive one alone,
    # which is what the envelope picks at the expensive model's own cost (the last grid point).
    gap = (exact.quality - searched.quality)[:-1]
    assert np.nanmax(gap) < 0.05 and np.nanmean(gap) < 0.005
    assert searched.quality[-1] < exact.quality[-1]


def test_subsequence_random_search_on_two_models_is_bounded_by_the_envelope() -> None:
    matrix = random_matrix(n=600, k=2, seed=8)
    split = _in_sample(matrix)
    grid = cost_grid(matrix.cost.mean(axis=0), 100)
    exact = envelope_split_curve(matrix, split, grid)
    searched = subsequence_split_curve(matrix, split, grid, trials=400, seed=1, search="random")
    assert np.all(searched.quality <= exact.quality + 1e-12)
    assert np.nanmax(exact.quality - searched.quality) < 0.03
    # single models are in the space: the cheapest budget is served by the cheap model alone
    assert searched.quality[0] == pytest.approx(matrix.quality[:, 0].mean())


def test_subsequence_space_lists_ordered_subsequences_up_to_four_models() -> None:
    space = subsequence_space(["a", "b", "c", "d", "e"])
    assert ("a",) in space.sequences and ("a", "c", "e") in space.sequences
    assert ("b", "a") not in space.sequences
    assert len(space.sequences) == 5 + 10 + 10 + 5
    assert space.max_stages == 4


@pytest.mark.parametrize("search", ["nsga2", "random"])
def test_searches_report_progress_per_trial_and_return_every_trial(search: str) -> None:
    matrix = random_matrix(n=200, k=4, seed=2)
    ticks: list[int] = []
    candidates = fixed_chain_candidates(
        matrix, np.arange(200), trials=45, seed=0, search=search, on_progress=ticks.append
    )
    assert sum(ticks) == 45
    assert len(candidates.routes) == 45 == candidates.cost.size
    assert all(len(route[0]) == len(route[1]) + 1 for route in candidates.routes)


def test_population_size_scales_with_trials_within_bounds() -> None:
    assert population_size_for(50) == 10
    assert population_size_for(200) == 20
    assert population_size_for(2000) == 100
    assert population_size_for(100_000) == 100
