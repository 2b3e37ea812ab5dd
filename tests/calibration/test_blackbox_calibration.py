"""Black-box scorers in calibration: scores from recorded calls, their cost where a model is scored."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from calibration.blackbox_scores import BlackboxOptions
from calibration.evaluation.routes import route_outcomes
from calibration.frontier import chain_metrics
from calibration.policy.calibrate import calibrate
from calibration.runs import load_runs
from calibration.runs_columns import RunsError
from calibration.tiers import parse_tiers
from policies import Policy
from policies.blackbox import SELF_REPORT_PROMPT, VERIFIER_PROMPT, verifier_score_from_position
from policies.store import check_content_hash

# Query i: fast is right on even i; its verifier says yes with P(yes) 0.9 on right answers, 0.2 on
# wrong ones; consistency samples agree 3/4 or 1/4; the self-report says 90 or 40.
N = 8
FAST_COST, BIG_COST, VERIFIER_COST, SAMPLES_COST, REPORT_COST = 1e-6, 1e-5, 4e-7, 8e-6, 2e-6


def first_token(p_yes: float) -> dict[str, Any]:
    return {
        "token": "Yes" if p_yes >= 0.5 else "No",
        "logprob": math.log(max(p_yes, 1 - p_yes)),
        "top_logprobs": [
            {"token": "Yes", "logprob": math.log(p_yes)},
            {"token": "No", "logprob": math.log(1 - p_yes)},
        ],
    }


def fast_row(i: int) -> dict[str, Any]:
    right = i % 2 == 0
    answer = str(2 * i) if right else "99"
    agreeing = 3 if right else 1
    return {
        "query_id": f"q{i}",
        "model": "fast",
        "correct": 1.0 if right else 0.0,
        "cost_usd": FAST_COST,
        "response": answer,
        "scorer_calls": {
            "verifier": {
                "model": "judge",
                "prompt": VERIFIER_PROMPT,
                "first_token": first_token(0.9 if right else 0.2),
                "cost_usd": VERIFIER_COST,
                "latency_ms": 10.0,
            },
            "consistency": {
                "temperature": 0.7,
                "samples": [answer] * agreeing + ["Answer: 5"] * (4 - agreeing),
                "cost_usd": SAMPLES_COST,
                "latency_ms": [5.0] * 4,
            },
            "self_report": {
                "prompt": SELF_REPORT_PROMPT,
                "text": "90" if right else "40",
                "cost_usd": REPORT_COST,
            },
        },
    }


def big_row(i: int) -> dict[str, Any]:
    return {"query_id": f"q{i}", "model": "big", "correct": 1.0, "cost_usd": BIG_COST, "response": str(2 * i)}


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for i in range(N) for row in (fast_row(i), big_row(i))))
    return path


def test_each_scorer_scores_the_recorded_calls_with_the_policies_functions(runs: Path) -> None:
    fast = slice(None), 0
    verifier = load_runs(runs, scorer="verifier")
    assert verifier.models == ("fast", "big")
    assert verifier.score[fast][0] == pytest.approx(verifier_score_from_position(first_token(0.9)))
    assert verifier.score[fast][1] == pytest.approx(0.2)
    assert verifier.top_k == 2
    consistency = load_runs(runs, scorer="consistency", blackbox=BlackboxOptions(equivalence="numeric"))
    assert list(consistency.score[fast][:2]) == [0.75, 0.25]
    report = load_runs(runs, scorer="self_report")
    assert list(report.score[fast][:2]) == [0.9, 0.4]


def test_a_model_without_recorded_calls_keeps_its_queries_and_is_never_scored(runs: Path) -> None:
    matrix = load_runs(runs, scorer="verifier")
    assert matrix.n_queries == N and matrix.unscored == ("big",)
    assert np.isnan(matrix.score[:, 1]).all()
    assert any("no recorded verifier calls for big" in note for note in matrix.notes)


def test_scoring_cost_is_paid_only_where_the_model_is_a_scored_stage(runs: Path) -> None:
    matrix = load_runs(runs, scorer="verifier")
    # fast alone: no scoring. fast -> big at 0.5: every query pays fast + its verifier, half pay big.
    assert chain_metrics(matrix, ["fast"], [])[0] == pytest.approx(FAST_COST)
    cost, quality, escalation = chain_metrics(matrix, ["fast", "big"], [0.5])
    assert cost == pytest.approx(FAST_COST + VERIFIER_COST + 0.5 * BIG_COST)
    assert (quality, escalation) == (1.0, 0.5)
    rows = np.arange(N)
    pair_cost, _ = route_outcomes(matrix, [(("fast", "big"), (0.5,)), (("fast",), ())], rows)
    assert list(pair_cost) == pytest.approx([FAST_COST + VERIFIER_COST + 0.5 * BIG_COST, FAST_COST])


def test_the_policy_carries_the_scorer_settings_and_expected_costs_include_scoring(runs: Path) -> None:
    matrix = load_runs(runs, scorer="consistency", blackbox=BlackboxOptions(equivalence="numeric", samples=2))
    spec = parse_tiers({"default_tier": "t", "tiers": {"t": {"max_cost_usd": 1.2e-5}}})
    policy = calibrate(matrix, spec).policy
    check_content_hash(Policy.model_validate(json.loads(policy.model_dump_json())))
    assert policy.scorer.model_dump() == {
        "name": "consistency",
        "top_k": 15,
        "tokens": "all",
        "samples": 2,
        "temperature": 0.7,
        "equivalence": "numeric",
    }
    # Two of four recorded samples: half of what the four cost.
    assert policy.models["fast"].scoring_cost_usd == pytest.approx(SAMPLES_COST / 2)
    assert policy.models["big"].scoring_cost_usd is None
    tier = policy.tiers["t"]
    route = tier.routes[0]
    assert route.models == ["fast", "big"]
    expected = FAST_COST + SAMPLES_COST / 2 + tier.expected.escalation_rate * BIG_COST
    assert tier.expected.cost_usd == pytest.approx(expected)


def test_recorded_calls_that_disagree_on_the_verifier_are_refused(runs: Path, tmp_path: Path) -> None:
    rows = [json.loads(line) for line in runs.read_text().splitlines()]
    rows[2]["scorer_calls"]["verifier"]["model"] = "other-judge"
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(RunsError, match="row 3: column 'scorer_calls': the recorded calls disagree on model"):
        load_runs(path, scorer="verifier")


def test_a_failed_call_is_a_missing_score_and_its_query_is_dropped(runs: Path, tmp_path: Path) -> None:
    rows = [json.loads(line) for line in runs.read_text().splitlines()]
    rows[0]["scorer_calls"]["self_report"] = {"prompt": SELF_REPORT_PROMPT, "error": "HTTP 500"}
    path = tmp_path / "failed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    matrix = load_runs(path, scorer="self_report")
    assert matrix.n_queries == N - 1 and "q0" not in matrix.query_ids


def test_runs_without_any_recorded_call_name_the_collect_options(tmp_path: Path) -> None:
    path = tmp_path / "plain.jsonl"
    path.write_text("".join(json.dumps(big_row(i) | {"scorer_calls": None}) + "\n" for i in range(2)))
    with pytest.raises(RunsError, match="no row has recorded 'verifier' calls"):
        load_runs(path, scorer="verifier")
    with pytest.raises(RunsError, match="--samples 9 but only 4 samples"):
        load_runs(
            _one_fast(tmp_path),
            scorer="consistency",
            blackbox=BlackboxOptions(samples=9),
        )


def _one_fast(tmp_path: Path) -> Path:
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(fast_row(0)) + "\n" + json.dumps(big_row(0)) + "\n")
    return path


def test_the_committed_blackbox_demo_policy_is_what_its_runs_and_tiers_give(repo_root: Path) -> None:
    from calibration.bounds import BoundSettings
    from calibration.heldout_expected import HeldoutSettings
    from calibration.policy.kinds import calibrate_kinds
    from calibration.tiers import load_tiers
    from policies import load_policy

    # As `cascade calibrate ... --scorer verifier` writes it: held-out expectations over 50 splits
    # and bounds at 95%.
    matrix = load_runs(repo_root / "data/local/arithmetic-blackbox-runs.jsonl.gz", scorer="verifier")
    spec = load_tiers(repo_root / "data/local/arithmetic-blackbox-tiers.yaml")
    committed = load_policy(repo_root / "policies/local-demo-blackbox.json")
    written = calibrate_kinds(
        {"text": matrix}, spec, heldout=HeldoutSettings(splits=50), bounds=BoundSettings()
    ).policy
    assert written.policy_id == committed.policy_id
    assert committed.tiers["balanced"].expected.heldout is not None
    assert committed.tiers["balanced"].expected.bounds is not None
    assert committed.scorer.verifier is not None and committed.scorer.verifier.model == "qwen2.5-coder-0.5b"
    assert committed.tiers["balanced"].routes[0].models == ["qwen1.5b-fast", "qwen1.5b-think"]
