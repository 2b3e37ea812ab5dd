"""The policy's score_distribution as calibration writes it (policy_writer and ``cascade calibrate``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from calibrate_command import LOGPROB_RUNS_TIERS, calibrate_with_tiers, write_logprob_runs
from synthetic_runs import random_matrix

from calibration.envelope import compute_envelope
from calibration.policy.policy_writer import build_calibrated_policy
from calibration.policy.score_distribution import score_distribution_document
from calibration.runs import RunsMatrix
from calibration.tiers import TierObjective, solve_tier
from policies.score_distribution import bin_index, decile_edges
from policies.scorers import score_logprobs
from policies.store import load_policy


def _solved(matrix: RunsMatrix, randomize: bool):  # type: ignore[no-untyped-def]
    envelope = compute_envelope(matrix)
    costs = np.sort(envelope.cost)
    budgets = {"low": float(costs[1] * 1.05), "mid": float(np.median(costs))}
    return envelope, {
        name: solve_tier(envelope, TierObjective(max_cost_usd=budget), randomize=randomize, name=name)
        for name, budget in budgets.items()
    }


def _by_hand(matrix: RunsMatrix, tier, edges: dict[str, list[float]]) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    """Walk every query through every route of the tier, one query at a time."""
    counts: dict[str, np.ndarray] = {}
    for route in tier.routes:
        for q in range(matrix.n_queries):
            for model, threshold in zip(route.models[:-1], route.thresholds, strict=True):
                score = matrix.score[q, matrix.model_index(model)]
                bins = counts.setdefault(model, np.zeros(len(edges[model]) + 1))
                bins[bin_index(edges[model], score)] += route.weight
                if not score < threshold:
                    break
    return {m: list(c / c.sum()) for m, c in counts.items() if c.sum() > 0}


@pytest.mark.parametrize("randomize", [False, True])
def test_tier_bins_are_the_scores_of_the_rows_that_reach_each_stage(randomize: bool) -> None:
    matrix = random_matrix(n=600, k=4, seed=3)
    envelope, tiers = _solved(matrix, randomize)
    policy = build_calibrated_policy(matrix, envelope, tiers, "low")
    distribution = policy.score_distribution
    assert distribution is not None and distribution.calibration_rows == 600
    scored = {m for t in policy.tiers.values() for r in t.routes for m in r.models[:-1]}
    assert scored and set(distribution.models) == scored
    edges = {m: distribution.models[m].edges for m in scored}
    for model in scored:
        column = matrix.score[:, matrix.model_index(model)]
        assert edges[model] == decile_edges(column)
        shares = np.bincount([bin_index(edges[model], s) for s in column], minlength=len(edges[model]) + 1)
        assert distribution.models[model].proportions == pytest.approx(list(shares / 600))
    for name, tier in policy.tiers.items():
        expected = _by_hand(matrix, tier, edges)
        assert set(distribution.tiers.get(name, {})) == set(expected)
        for model, shares in expected.items():
            assert distribution.tiers[name][model] == pytest.approx(shares, abs=1e-12)


def test_a_later_stage_sees_only_escalated_rows() -> None:
    # A (scores 0.1..0.9) escalates below 0.5 to B; B's tier bins then hold only queries 0-3.
    from runs_factory import make_matrix

    n = 9
    matrix = make_matrix(
        ["A", "B", "C"],
        quality=[[0] * n, [1] * n, [1] * n],
        cost=[[1] * n, [2] * n, [3] * n],
        score=[[0.1 * (i + 1) for i in range(n)], [0.1 * (9 - i) for i in range(n)], [0.5] * n],
    )
    envelope = compute_envelope(matrix)
    from calibration.tiers import RouteShare, TierSolution

    tier = TierSolution(
        name="t",
        objective=TierObjective(max_cost_usd=10),
        routes=[RouteShare(weight=1.0, models=("A", "B", "C"), thresholds=(0.45, 0.6), envelope_index=0)],
        cost=2.0,
        quality=1.0,
        escalation_rate=0.4,
        shadow_price=None,
    )
    document = score_distribution_document(matrix, {"t": tier})
    assert document is not None
    b_edges = document["models"]["B"]["edges"]
    reached_b = [0.9, 0.8, 0.7, 0.6]  # B's scores on queries 0-3 (A scored 0.1-0.4 there)
    by_hand = np.bincount([bin_index(b_edges, s) for s in reached_b], minlength=len(b_edges) + 1) / 4
    assert document["tiers"]["t"]["B"] == pytest.approx(list(by_hand))
    assert set(document["tiers"]["t"]) == {"A", "B"}
    assert build_calibrated_policy(matrix, envelope, {"t": tier}, "t").score_distribution is not None


def test_single_model_tiers_record_no_distribution() -> None:
    matrix = random_matrix(n=50, k=2, seed=1)
    envelope = compute_envelope(matrix)
    tiers = {"top": solve_tier(envelope, TierObjective(min_quality=0.0), name="top")}
    assert len(tiers["top"].routes[0].models) == 1
    policy = build_calibrated_policy(matrix, envelope, tiers, "top")
    assert policy.score_distribution is None


def test_cascade_calibrate_writes_the_scorers_deciles(tmp_path: Path) -> None:
    runs = tmp_path / "runs.jsonl"
    rows = write_logprob_runs(runs, queries=40, step=0.05)
    small_scores = [
        score_logprobs(json.loads(row["logprobs"]), "sequence_probability", 10)
        for row in rows
        if row["model"] == "small"
    ]
    args = ("--scorer", "sequence_probability", "--top-k", "10")
    result = calibrate_with_tiers(tmp_path, LOGPROB_RUNS_TIERS, runs, *args)
    assert result.exit_code == 0, result.output
    policy = load_policy(tmp_path / "policy.json")
    assert policy.tiers["t"].routes[0].models == ["small", "large"]
    distribution = policy.score_distribution
    assert distribution is not None
    assert distribution.models["small"].edges == decile_edges(np.array(small_scores))
    assert len(distribution.models["small"].edges) == 9
    # The first stage sees every query: its tier bins are those of all rows (a tenth each).
    assert distribution.tiers["t"]["small"] == pytest.approx([0.1] * 10)
