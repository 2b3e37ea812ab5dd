"""Exact pair frontiers and chain simulation against brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from runs_factory import make_matrix

from calibration.frontier import chain_metrics, frontier_thresholds, pair_frontier, pair_metrics_at


@st.composite
def cascades(draw: st.DrawFn) -> tuple[np.ndarray, ...]:
    """Small random cascades; scores drawn from a few values so ties are common."""
    n = draw(st.integers(1, 25))
    scores = draw(arrays(np.float64, n, elements=st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.9, 1.0])))
    costs = st.floats(0, 5, allow_nan=False, allow_infinity=False)
    cost_l = draw(arrays(np.float64, n, elements=costs))
    cost_h = draw(arrays(np.float64, n, elements=costs))
    quality_l = draw(arrays(np.float64, n, elements=st.sampled_from([0.0, 0.5, 1.0])))
    quality_h = draw(arrays(np.float64, n, elements=st.sampled_from([0.0, 0.5, 1.0])))
    return scores, cost_l, quality_l, cost_h, quality_h


def brute_force(scores, cost_l, quality_l, cost_h, quality_h, tau):  # type: ignore[no-untyped-def]
    escalate = scores < tau
    cost = np.mean(cost_l + np.where(escalate, cost_h, 0.0))
    quality = np.mean(np.where(escalate, quality_h, quality_l))
    return cost, quality, np.mean(escalate)


@settings(max_examples=200, deadline=None)
@given(cascades())
def test_pair_frontier_matches_brute_force_at_every_threshold(data: tuple[np.ndarray, ...]) -> None:
    curve = pair_frontier(*data)
    assert len(curve) == np.unique(data[0]).size + 1
    for tau, cost, quality, rate in zip(
        curve.thresholds, curve.cost, curve.quality, curve.escalation_rate, strict=True
    ):
        expected = brute_force(*data, tau)
        assert cost == pytest.approx(expected[0], abs=1e-9)
        assert quality == pytest.approx(expected[1], abs=1e-12)
        assert rate == pytest.approx(expected[2], abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(cascades())
def test_pair_frontier_spans_no_escalation_to_full_escalation(data: tuple[np.ndarray, ...]) -> None:
    _, cost_l, quality_l, cost_h, quality_h = data
    curve = pair_frontier(*data)
    assert curve.escalation_rate[0] == 0 and curve.escalation_rate[-1] == 1
    assert curve.quality[0] == pytest.approx(quality_l.mean())
    assert curve.quality[-1] == pytest.approx(quality_h.mean())
    assert curve.cost[-1] == pytest.approx((cost_l + cost_h).mean())
    assert np.all(np.diff(curve.escalation_rate) > 0)  # each threshold adds one group of tied scores


@settings(max_examples=100, deadline=None)
@given(cascades(), st.lists(st.floats(-0.5, 1.5, allow_nan=False), min_size=1, max_size=6))
def test_pair_metrics_at_arbitrary_thresholds_match_brute_force(
    data: tuple[np.ndarray, ...], thresholds: list[float]
) -> None:
    curve = pair_metrics_at(*data, thresholds)
    for i, tau in enumerate(thresholds):
        cost, quality, rate = brute_force(*data, tau)
        assert curve.cost[i] == pytest.approx(cost, abs=1e-9)
        assert curve.quality[i] == pytest.approx(quality, abs=1e-12)
        assert curve.escalation_rate[i] == pytest.approx(rate)


def test_ties_escalate_together_because_the_rule_is_strict() -> None:
    scores = np.array([0.5, 0.5, 0.2])
    thresholds = frontier_thresholds(scores)
    assert thresholds[:2].tolist() == [0.2, 0.5] and thresholds[2] > 0.5
    curve = pair_frontier(scores, np.ones(3), np.zeros(3), np.ones(3), np.ones(3))
    assert curve.escalation_rate.tolist() == pytest.approx([0, 1 / 3, 1])


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_three_stage_chain_matches_per_query_simulation(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 15))
    unit = st.sampled_from([0.0, 0.3, 0.6, 1.0])
    rows = [[data.draw(unit) for _ in range(n)] for _ in range(9)]
    matrix = make_matrix(["a", "b", "c"], rows[0:3], [[1] * n, [3] * n, [9] * n], rows[3:6])
    t1, t2 = data.draw(unit), data.draw(unit)
    cost, quality, rate = chain_metrics(matrix, ["a", "b", "c"], [t1, t2])
    expected_cost, expected_quality, escalated = [], [], []
    for q in range(n):
        if matrix.score[q, 0] >= t1:
            expected_cost.append(1), expected_quality.append(matrix.quality[q, 0]), escalated.append(0)
        elif matrix.score[q, 1] >= t2:
            expected_cost.append(4), expected_quality.append(matrix.quality[q, 1]), escalated.append(1)
        else:
            expected_cost.append(13), expected_quality.append(matrix.quality[q, 2]), escalated.append(1)
    assert cost == pytest.approx(np.mean(expected_cost))
    assert quality == pytest.approx(np.mean(expected_quality))
    assert rate == pytest.approx(np.mean(escalated))


def test_chain_metrics_of_a_pair_equals_the_pair_frontier_on_given_rows() -> None:
    rng = np.random.default_rng(7)
    n = 200
    matrix = make_matrix(
        ["l", "h"],
        rng.integers(0, 2, (2, n)),
        [rng.random(n), rng.random(n) * 10],
        rng.random((2, n)),
    )
    rows = np.arange(0, n, 2)
    tau = float(np.median(matrix.score[rows, 0]))
    curve = pair_metrics_at(
        matrix.score[rows, 0],
        matrix.cost[rows, 0],
        matrix.quality[rows, 0],
        matrix.cost[rows, 1],
        matrix.quality[rows, 1],
        [tau],
    )
    assert chain_metrics(matrix, ["l", "h"], [tau], rows) == pytest.approx(
        (curve.cost[0], curve.quality[0], curve.escalation_rate[0])
    )


def test_single_model_chain_is_that_model() -> None:
    matrix = make_matrix(["a"], [[1, 0, 1]], [[2, 2, 5]], [[0.1, 0.2, 0.3]])
    assert chain_metrics(matrix, ["a"], []) == pytest.approx((3.0, 2 / 3, 0.0))


def test_chain_metrics_rejects_wrong_threshold_count() -> None:
    matrix = make_matrix(["a", "b"], [[1], [1]], [[1], [1]], [[0.1], [0.2]])
    with pytest.raises(ValueError, match="needs 1 thresholds"):
        chain_metrics(matrix, ["a", "b"], [])
