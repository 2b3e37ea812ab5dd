"""The pairwise envelope: pool, pairs, Pareto set, switching points and hull."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runs_factory import four_model_example, make_matrix

from calibration.envelope import compute_envelope, concave_hull, dominated_models


def test_hand_made_example_gives_the_envelope_worked_out_by_hand() -> None:
    envelope = compute_envelope(four_model_example())
    assert envelope.pool == ("A", "B", "C")  # D costs more than B and is worse
    assert set(envelope.pairs) == {("A", "B"), ("A", "C"), ("B", "C")}
    assert envelope.cost.tolist() == pytest.approx([1.0, 1.5, 4.5])
    assert envelope.quality.tolist() == pytest.approx([0.5, 0.75, 1.0])
    assert envelope.escalation_rate.tolist() == pytest.approx([0.0, 0.25, 0.25])
    assert envelope.models == [("A",), ("A", "B"), ("B", "C")]
    assert envelope.thresholds == [(), (0.2,), (0.5,)]
    assert envelope.switching_points == [1, 2]
    assert envelope.hull.tolist() == [0, 1, 2]


def test_dominance_needs_strictly_cheaper_and_strictly_better() -> None:
    cost = np.array([1.0, 1.0, 2.0, 3.0])
    quality = np.array([0.5, 0.4, 0.5, 0.4])
    # model 1 ties model 0 on cost (kept); model 2 ties on quality (kept); model 3 is beaten by 0.
    assert dominated_models(cost, quality).tolist() == [False, False, False, True]


def test_equal_cost_models_form_a_pair_when_the_second_is_better() -> None:
    n = 6
    matrix = make_matrix(
        ["weak", "strong"],
        [[1, 0, 0, 0, 1, 0], [1, 1, 1, 0, 1, 1]],
        [[1] * n, [1] * n],
        [[0.9, 0.1, 0.2, 0.3, 0.8, 0.4], [0.5] * n],
    )
    envelope = compute_envelope(matrix)
    assert ("weak", "strong") in envelope.pairs


def test_concave_hull_skips_points_under_the_chord() -> None:
    cost = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    quality = np.array([0.0, 0.5, 0.6, 0.9, 1.0])
    # (2, .5), (4, .9) are vertices; (3, .6) lies under the chord from (2, .5) to (4, .9).
    assert concave_hull(cost, quality).tolist() == [0, 1, 3, 4]


def test_concave_hull_of_collinear_points_is_the_two_ends() -> None:
    cost = np.array([1.0, 2.0, 3.0])
    assert concave_hull(cost, cost / 10).tolist() == [0, 2]


@st.composite
def small_matrices(draw: st.DrawFn):  # type: ignore[no-untyped-def]
    k = draw(st.integers(2, 4))
    n = draw(st.integers(2, 12))
    unit = st.sampled_from([0.0, 0.25, 0.5, 1.0])
    quality = [[draw(st.sampled_from([0.0, 1.0])) for _ in range(n)] for _ in range(k)]
    score = [[draw(unit) for _ in range(n)] for _ in range(k)]
    base = sorted(draw(st.lists(st.sampled_from([1.0, 2.0, 3.0, 5.0, 8.0]), min_size=k, max_size=k)))
    cost = [[c] * n for c in base]
    return make_matrix([f"m{i}" for i in range(k)], quality, cost, score)


def spec_candidates(matrix) -> list[tuple[float, float]]:  # type: ignore[no-untyped-def]
    """Brute force over the envelope's candidate set, one query at a time.

    Singles; pool = models no other model beats strictly on cost and quality; pairs = (L, H) from
    the pool, L before H in cost order, a_H > a_L; every distinct L score (and +inf) a threshold.
    """
    k = len(matrix.models)
    cost = [float(matrix.cost[:, j].mean()) for j in range(k)]
    quality = [float(matrix.quality[:, j].mean()) for j in range(k)]
    points = list(zip(cost, quality, strict=True))
    pool = [m for m in range(k) if not any(cost[j] < cost[m] and quality[j] > quality[m] for j in range(k))]
    for a, low in enumerate(pool):
        for high in pool[a + 1 :]:
            if quality[high] <= quality[low]:
                continue
            for tau in [*sorted(set(matrix.score[:, low].tolist())), float("inf")]:
                per_query = [
                    (
                        matrix.cost[q, low] + (matrix.cost[q, high] if matrix.score[q, low] < tau else 0),
                        matrix.quality[q, high] if matrix.score[q, low] < tau else matrix.quality[q, low],
                    )
                    for q in range(matrix.n_queries)
                ]
                points.append(tuple(np.mean(per_query, axis=0).tolist()))
    return points


@settings(max_examples=150, deadline=None)
@given(small_matrices())
def test_envelope_weakly_dominates_every_design_candidate(matrix) -> None:  # type: ignore[no-untyped-def]
    envelope = compute_envelope(matrix)
    assert np.all(np.diff(envelope.cost) > 0) and np.all(np.diff(envelope.quality) > 0)
    for cost, quality in spec_candidates(matrix):
        affordable = envelope.cost <= cost + 1e-9
        assert affordable.any()
        assert envelope.quality[affordable].max() >= quality - 1e-9


@settings(max_examples=100, deadline=None)
@given(small_matrices())
def test_envelope_routes_reproduce_their_cost_and_quality(matrix) -> None:  # type: ignore[no-untyped-def]
    from calibration.frontier import chain_metrics

    envelope = compute_envelope(matrix)
    for i in range(len(envelope)):
        cost, quality, rate = chain_metrics(matrix, envelope.models[i], envelope.thresholds[i])
        assert (cost, quality, rate) == pytest.approx(
            (envelope.cost[i], envelope.quality[i], envelope.escalation_rate[i])
        )
    switches = [i for i in range(1, len(envelope)) if set(envelope.models[i]) != set(envelope.models[i - 1])]
    assert envelope.switching_points == switches
    hull = envelope.hull
    assert hull[0] == 0 and hull[-1] == len(envelope) - 1
    slopes = np.diff(envelope.quality[hull]) / np.diff(envelope.cost[hull])
    assert np.all(np.diff(slopes) < 1e-9)  # concave
    # Every envelope point lies on or under the hull.
    under = np.interp(envelope.cost, envelope.cost[hull], envelope.quality[hull])
    assert np.all(envelope.quality <= under + 1e-9)


def test_envelope_on_a_subset_of_rows_equals_envelope_of_the_subset() -> None:
    matrix = four_model_example()
    rows = np.array([0, 1, 3])
    whole = compute_envelope(matrix, rows)
    part = compute_envelope(matrix.subset(rows))
    assert whole.cost.tolist() == part.cost.tolist()
    assert whole.models == part.models


def monotone_chain_upper_hull(x: np.ndarray, y: np.ndarray) -> list[int]:
    """Reference: Andrew's monotone chain, dropping collinear points."""
    chain: list[int] = []
    for i in range(x.size):
        while len(chain) >= 2:
            a, b = chain[-2], chain[-1]
            if (x[b] - x[a]) * (y[i] - y[a]) - (y[b] - y[a]) * (x[i] - x[a]) >= 0:
                chain.pop()
            else:
                break
        chain.append(i)
    return chain


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 60), st.integers(1, 60)), min_size=1, max_size=40))
def test_concave_hull_matches_a_monotone_chain(steps: list[tuple[int, int]]) -> None:
    cost = np.cumsum([s[0] for s in steps])
    quality = np.cumsum([s[1] for s in steps])
    expected = monotone_chain_upper_hull(cost, quality)  # exact integer arithmetic
    assert concave_hull(cost * 1e-5, quality / 1000).tolist() == expected


def test_concave_hull_of_a_shape_exposing_one_vertex_per_pass_is_still_exact() -> None:
    cost = np.arange(1, 501, dtype=float)
    quality = np.sqrt(cost) / 100
    quality[-1] = 10.0  # a far jump: peeling would take ~500 passes, the fallback scan finishes it
    assert concave_hull(cost, quality).tolist() == [0, 499]
