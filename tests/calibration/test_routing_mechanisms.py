"""The router as served (folded linear models), route-then-cascade, and the per-tier mechanism choice."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from synthetic_runs import random_matrix

from calibration.evaluation.hybrid import hybrid_split_curve, linear_router_split_curve
from calibration.evaluation.protocol import cost_grid
from calibration.frontier import pair_frontier
from calibration.heldout_expected import HeldoutSettings
from calibration.policy.calibrate import calibrate
from calibration.routing.fit import fit_linear_router
from calibration.routing.hybrid import hybrid_candidates
from calibration.routing.mechanisms import RoutingOptions
from calibration.runs import RunsMatrix
from calibration.splits import stratified_splits
from calibration.tiers import TierObjective, TiersSpec
from policies.route_features import CHEAP, feature_dims
from policies.router import LinearRouter, routed_choice
from policies.score_distribution import bin_counts, decile_edges


def _oracle_matrix(n: int = 400, seed: int = 0) -> RunsMatrix:
    """Cheap right exactly when feature 0 is 1 (four noise features, the rest of the ``cheap-v1``
    vector 0), expensive always right; the cheap model's confidence says nothing, so no cascade can
    tell, and a router can."""
    rng = np.random.default_rng(seed)
    x = (rng.random(n) < 0.6).astype(float)
    features = np.zeros((n, feature_dims(CHEAP)))
    features[:, 0] = x
    features[:, 1:5] = rng.normal(size=(n, 4))
    return RunsMatrix(
        models=("cheap", "expensive"),
        query_ids=np.array([f"q{i}" for i in range(n)]),
        quality=np.column_stack([x, np.ones(n)]),
        cost=np.tile([1e-5, 1e-4], (n, 1)),
        score=rng.random((n, 2)),
        features=features,
    )


def test_folded_coefficients_predict_exactly_what_the_fitted_pipeline_does() -> None:
    from sklearn.decomposition import PCA
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    matrix = random_matrix(300, k=3, seed=2)
    rng = np.random.default_rng(1)
    features = rng.normal(size=(300, 10)) + matrix.quality[:, :1]
    router = fit_linear_router(features, matrix.quality, matrix.models, "cheap-v1", components=4)
    pca = PCA(n_components=4, random_state=0).fit(features)
    reduced = pca.transform(features)
    scaler = StandardScaler().fit(reduced)
    for j in range(3):
        labels = matrix.quality[:, j] >= 0.5
        model = LogisticRegression(max_iter=1000, random_state=0).fit(scaler.transform(reduced), labels)
        expected = model.predict_proba(scaler.transform(reduced))[:, 1]
        np.testing.assert_allclose(router.probabilities(features)[:, j], expected, atol=1e-9)


def test_a_model_right_on_every_row_gets_a_constant_probability_near_one() -> None:
    quality = np.column_stack([np.ones(50), np.arange(50) % 2])
    router = fit_linear_router(np.arange(50.0)[:, None], quality, ("a", "b"), "cheap-v1", components=None)
    p = router.probabilities(np.array([[3.0], [40.0]]))
    assert np.all(p[:, 0] > 0.99) and np.all(router.coef[0] == 0)


def test_routed_choice_breaks_ties_towards_the_cheaper_model() -> None:
    assert routed_choice(np.array([0.5, 0.5]), [2e-5, 1e-5], 0.0) == 1
    assert routed_choice(np.array([0.9, 0.2]), [1e-4, 1e-5], 10000.0) == 1  # price weight favours cheap
    assert routed_choice(np.array([0.9, 0.2]), [1e-4, 1e-5], 0.0) == 0


def test_hybrid_without_direct_routes_is_the_plain_cascade() -> None:
    matrix = random_matrix(200, k=2, seed=5, features=True)
    rows = np.arange(200)
    p = np.zeros((200, 2))  # tau = 0 is the only level: nothing goes direct
    candidates = hybrid_candidates(matrix, rows, p)
    pair = candidates.low != candidates.high
    curve = pair_frontier(
        matrix.score[:, 0], matrix.cost[:, 0], matrix.quality[:, 0], matrix.cost[:, 1], matrix.quality[:, 1]
    )
    np.testing.assert_allclose(candidates.cost[pair], curve.cost)
    np.testing.assert_allclose(candidates.quality[pair], curve.quality)
    assert np.all(candidates.direct[pair] == 0)


def test_hybrid_choices_never_depend_on_test_rows() -> None:
    matrix = random_matrix(300, k=3, seed=3, features=True)
    (split,) = stratified_splits(matrix.n_queries, n_splits=1, seed=1)
    grid = cost_grid(matrix.cost.mean(axis=0), 60)
    scrambled_quality = matrix.quality.copy()
    rng = np.random.default_rng(0)
    scrambled_quality[split.test] = rng.permutation(scrambled_quality[split.test])
    scrambled = replace(matrix, quality=scrambled_quality)
    first = hybrid_split_curve(matrix, split, grid, components=None)
    second = hybrid_split_curve(scrambled, split, grid, components=None)
    np.testing.assert_array_equal(first.cost, second.cost)  # same routes chosen, same test costs
    assert not np.allclose(np.nan_to_num(first.quality), np.nan_to_num(second.quality))


def test_with_an_informative_feature_router_and_hybrid_beat_the_cascade_held_out() -> None:
    matrix = _oracle_matrix()
    (split,) = stratified_splits(matrix.n_queries, n_splits=1, seed=4)
    grid = cost_grid(matrix.cost.mean(axis=0), 100)
    from calibration.evaluation.heldout import envelope_split_curve

    middle = 70  # a budget between the cheap model and the oracle's mix
    cascade = envelope_split_curve(matrix, split, grid).quality[middle]
    routed = linear_router_split_curve(matrix, split, grid, components=None).quality[middle]
    hybrid = hybrid_split_curve(matrix, split, grid, components=None).quality[middle]
    assert routed > cascade + 0.1 and hybrid > cascade + 0.1


SPEC = TiersSpec("mid", {"low": TierObjective(max_cost_usd=3e-5), "mid": TierObjective(max_cost_usd=6e-5)})
SETTINGS = HeldoutSettings(splits=6)


def test_calibration_serves_a_router_where_it_wins_held_out_and_the_policy_carries_it() -> None:
    matrix = _oracle_matrix()
    options = RoutingOptions(("cascade", "routed", "hybrid"), "cheap-v1", components=None)
    result = calibrate(matrix, SPEC, heldout=SETTINGS, routing=options)
    assert result.mechanisms is not None
    policy = result.policy
    assert policy.router is not None and policy.router.models == ["cheap", "expensive"]
    mid = policy.tiers["mid"]
    assert result.mechanisms["mid"].mechanism in ("routed", "hybrid")
    assert mid.routing is not None and mid.routing.mechanism == result.mechanisms["mid"].mechanism
    compared = mid.routing.compared
    assert compared[mid.routing.mechanism].quality > compared["cascade"].quality
    assert mid.expected.heldout is not None and mid.expected.heldout.splits == 6
    assert mid.routes[0].models  # the calibrated cascade stays, as the fallback


def test_a_routed_tier_records_where_the_routers_probability_fell_for_the_drift_metric() -> None:
    matrix = _oracle_matrix()
    options = RoutingOptions(("cascade", "routed"), "cheap-v1", components=None)
    policy = calibrate(matrix, SPEC, heldout=SETTINGS, routing=options).policy
    mid = policy.tiers["mid"]
    assert policy.router is not None and mid.routing is not None and mid.routing.mechanism == "routed"
    bins = mid.routing.probability
    assert bins is not None and abs(sum(bins.proportions) - 1) < 1e-9
    # The probability the gateway reports for each calibration query (the chosen model's), binned.
    router = LinearRouter(
        policy.router.features,
        tuple(policy.router.models),
        np.asarray(policy.router.coef),
        np.asarray(policy.router.intercept),
    )
    assert mid.routing.price_weight is not None
    reported = [
        p[routed_choice(p, policy.router.cost_usd, mid.routing.price_weight)]
        for p in router.probabilities(matrix.features)
    ]
    assert bins.edges == decile_edges(np.array(reported))
    np.testing.assert_allclose(bins.proportions, bin_counts(bins.edges, np.array(reported)) / len(reported))


def test_a_calibration_that_keeps_every_tier_a_cascade_keeps_its_policy_id() -> None:
    matrix = _oracle_matrix()
    plain = calibrate(matrix, SPEC, heldout=SETTINGS)
    cascades_only = calibrate(
        matrix, SPEC, heldout=SETTINGS, routing=RoutingOptions(("cascade",), "cheap-v1")
    )
    assert cascades_only.policy.policy_id == plain.policy.policy_id
    assert cascades_only.policy.router is None
    assert {choice.mechanism for choice in (cascades_only.mechanisms or {}).values()} == {"cascade"}


def test_routing_needs_held_out_expectations() -> None:
    with pytest.raises(ValueError, match="held-out"):
        calibrate(_oracle_matrix(), SPEC, routing=RoutingOptions(("routed",), "cheap-v1"))


def test_the_calibration_report_sets_the_mechanisms_side_by_side_and_plots_their_curves(
    tmp_path: Path,
) -> None:
    from calibration.reporting.calibration_plots import envelope_figure
    from calibration.reporting.calibration_report import write_calibration_report
    from calibration.reporting.html import format_cell

    matrix = _oracle_matrix()
    options = RoutingOptions(("cascade", "routed", "hybrid"), "cheap-v1", components=None)
    result = calibrate(matrix, SPEC, heldout=SETTINGS, routing=options)
    assert result.mechanisms is not None and result.curves is not None
    page = write_calibration_report(
        tmp_path,
        matrix,
        result.envelope,
        result.solutions,
        SPEC.default_tier,
        mechanisms=result.mechanisms,
        curves=result.curves,
    )
    html = page.read_text()
    assert "Mechanisms per tier (held out)" in html
    for name in ("cascade", "routed", "hybrid"):
        assert f"<th>{name} quality</th>" in html and f"<th>{name} cost (USD)</th>" in html
    for tier, choice in result.mechanisms.items():
        for outcome in choice.compared.values():
            for value in (outcome["quality"], outcome["cost_usd"]):
                assert f'<td class="num">{format_cell(value)}</td>' in html, tier

    axes = envelope_figure(result.envelope, result.solutions, curves=result.curves).axes[0]
    lines = {line.get_label(): line for line in axes.get_lines()}
    router_line, hybrid_line = lines["router (price sweep)"], lines["route-then-cascade (hybrid)"]
    np.testing.assert_allclose(router_line.get_xdata(), result.curves.routed_cost)
    np.testing.assert_allclose(hybrid_line.get_ydata(), result.curves.hybrid_quality)
    # The cheap model's confidence says nothing here, the features everything: at the middle
    # budget both curves lie well above the cascade envelope.
    budget = 6e-5
    envelope_best = result.envelope.quality[result.envelope.cost <= budget].max()
    assert result.curves.routed_quality[result.curves.routed_cost <= budget].max() > envelope_best + 0.1
    assert result.curves.hybrid_quality[result.curves.hybrid_cost <= budget].max() > envelope_best + 0.1
    # Frontiers: cost and quality both rise.
    assert np.all(np.diff(result.curves.routed_cost) > 0) and np.all(
        np.diff(result.curves.routed_quality) > 0
    )


def test_a_hybrid_tiers_score_bins_are_those_of_the_queries_its_router_cascades() -> None:
    matrix = _oracle_matrix()
    options = RoutingOptions(("cascade", "hybrid"), "cheap-v1", components=None)
    policy = calibrate(matrix, SPEC, heldout=SETTINGS, routing=options).policy
    mid = policy.tiers["mid"]
    assert mid.routing is not None and mid.routing.mechanism == "hybrid"
    assert mid.routing.models == ["cheap", "expensive"] and mid.routing.direct_below is not None
    assert policy.router is not None and policy.score_distribution is not None
    router = LinearRouter(
        policy.router.features,
        tuple(policy.router.models),
        np.asarray(policy.router.coef),
        np.asarray(policy.router.intercept),
    )
    cascaded = router.probabilities(matrix.features)[:, 0] >= mid.routing.direct_below
    assert 0 < cascaded.sum() < matrix.n_queries  # the sure failures go straight to expensive
    edges = policy.score_distribution.models["cheap"].edges
    expected = bin_counts(edges, matrix.score[cascaded, 0])
    np.testing.assert_allclose(policy.score_distribution.tiers["mid"]["cheap"], expected / expected.sum())
    assert set(policy.score_distribution.tiers["mid"]) == {"cheap"}


def test_recalibration_scores_a_routed_or_hybrid_tier_exactly_as_calibration_measured_it() -> None:
    from calibration.recalibration.outcomes import PolicyOutcomeError, policy_outcomes

    matrix = _oracle_matrix()
    every = np.arange(matrix.n_queries)
    for mechanisms in (("cascade", "routed"), ("cascade", "hybrid")):
        options = RoutingOptions(mechanisms, "cheap-v1", components=None)
        policy = calibrate(matrix, SPEC, heldout=SETTINGS, routing=options).policy
        outcomes = policy_outcomes(policy, matrix, every)
        mid = policy.tiers["mid"]
        assert mid.routing is not None and mid.routing.mechanism == mechanisms[1]
        assert outcomes["mid"].cost.mean() == pytest.approx(mid.expected.cost_usd)
        assert outcomes["mid"].quality.mean() == pytest.approx(mid.expected.quality)
        assert outcomes["mid"].escalated.mean() == pytest.approx(mid.expected.escalation_rate)
        with pytest.raises(PolicyOutcomeError, match="carry no cheap-v1 features"):
            policy_outcomes(policy, replace(matrix, features=None), every)
