"""The model-free parts of the two-replica learning test: its starting policy, tiers and metric reads.

No model server is needed: the source policies are built here, or calibrated by the real
`cascade calibrate` from a generated runs table of the pool's members.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
from pathlib import Path

import pytest
import yaml
from learning_e2e_support import (
    BUDGET_FACTOR,
    TIER,
    StartingPolicyError,
    calibrate_command,
    complete_queries,
    metric_value,
    names_members,
    never_escalate,
    never_escalating_policy,
    parse_metrics,
    price_sheet,
    reference_model,
    source_policy_file,
    source_tiers,
    tiers_document,
)

from calibration.tiers import parse_tiers
from localpool.manifest import Manifest, load_manifest
from policies import Policy, build_policy, load_policy, save_policy, should_escalate
from policies.scorers import SCORE_RANGES
from publishing import check_servable

CHEAP, MIDDLE, STRONG = "qwen0.5b-fast", "qwen1.5b-fast", "qwen1.5b-think"
BINS = {"edges": [0.2, 0.5, 0.8], "proportions": [0.1, 0.2, 0.3, 0.4]}


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    return load_manifest()


def _source(scored: dict[str, dict[str, list[float]]] | None, route: list[str] | None = None) -> Policy:
    """A calibrated-looking source policy over the three members, scored models as given."""
    route = route or [CHEAP, STRONG]
    document = {
        "schema_version": 1,
        "scorer": {"name": "min_probability", "top_k": 10},
        "models": {
            CHEAP: {"mean_cost_usd": 2e-6, "quality": 0.5},
            MIDDLE: {"mean_cost_usd": 7e-6, "quality": 0.65},
            STRONG: {"mean_cost_usd": 1.6e-5, "quality": 0.98},
        },
        "default_tier": "economy",
        "tiers": {
            "economy": {
                "objective": {"max_cost_usd": 1e-5},
                "routes": [{"weight": 1.0, "models": route, "thresholds": [0.4] * (len(route) - 1)}],
                "expected": {"cost_usd": 9e-6, "quality": 0.8, "escalation_rate": 0.4},
            }
        },
    }
    if scored is not None:
        document["score_distribution"] = {
            "calibration_rows": 200,
            "models": scored,
            "tiers": {"economy": {m: bins["proportions"] for m, bins in scored.items()}},
        }
    return build_policy(document)


def test_the_starting_policy_never_escalates_and_keeps_the_cheap_models_calibration_bins() -> None:
    source = _source(
        {CHEAP: BINS, MIDDLE: {"edges": [0.5], "proportions": [0.5, 0.5]}}, [CHEAP, MIDDLE, STRONG]
    )
    policy = never_escalating_policy(source)
    assert list(policy.tiers) == [TIER] and policy.default_tier == TIER
    (route,) = policy.tiers[TIER].routes
    assert route.models == [CHEAP, STRONG]  # the cheapest scored model, then the reference
    assert reference_model(policy) == STRONG
    low, high = SCORE_RANGES[policy.scorer.name]
    for score in [low, low + 1e-9, 0.3, high, None]:  # every score the scorer can give, and none
        assert not should_escalate(score, route.thresholds[0], policy.on_missing_score), score
    assert route.thresholds == [never_escalate(policy.scorer.name)]
    assert set(policy.models) == set(source.models)  # every pool model still gets traffic rows
    assert policy.scorer == source.scorer
    expected = policy.tiers[TIER].expected
    assert (expected.cost_usd, expected.quality, expected.escalation_rate) == (2e-6, 0.5, 0.0)
    budget = policy.tiers[TIER].objective.max_cost_usd
    assert budget == pytest.approx(BUDGET_FACTOR * (2e-6 + 7e-6 + 1.6e-5))
    distribution = policy.score_distribution
    assert distribution is not None and list(distribution.models) == [CHEAP]
    assert distribution.models[CHEAP].edges == BINS["edges"]
    assert distribution.tiers == {TIER: {CHEAP: BINS["proportions"]}}
    check_servable(policy, list(source.models))  # content hash and models: a gateway serves it


@pytest.mark.parametrize(
    ("scored", "route"),
    [(None, [CHEAP, STRONG]), ({STRONG: BINS}, [STRONG, CHEAP])],
    ids=["no score bins", "only the reference has bins"],
)
def test_a_source_without_bins_of_a_cheap_model_is_refused(
    scored: dict[str, dict[str, list[float]]] | None, route: list[str]
) -> None:
    with pytest.raises(StartingPolicyError, match="score bins"):
        never_escalating_policy(_source(scored, route))


def test_the_tiers_file_holds_the_served_objective() -> None:
    policy = never_escalating_policy(_source({CHEAP: BINS}))
    spec = parse_tiers(tiers_document(policy))
    assert spec.default_tier == TIER
    assert spec.tiers[TIER].max_cost_usd == policy.tiers[TIER].objective.max_cost_usd
    assert spec.tiers[TIER].min_quality is None


def _runs_rows(queries: int, seed: int = 0) -> list[dict[str, object]]:
    """Rows of the three members as `cascade collect` writes them: the cheap one's confidence
    predicts its correctness, the strong one is nearly always right."""
    rng = random.Random(seed)
    rows = []
    for q in range(queries):
        for model, p_right in ((CHEAP, 0.5), (MIDDLE, 0.65), (STRONG, 0.97)):
            right = rng.random() < p_right
            p = rng.uniform(0.6, 0.99) if right else rng.uniform(0.05, 0.6)
            token = {"token": "7", "logprob": math.log(p), "bytes": [55]}
            alternative = {"token": "8", "logprob": math.log(1 - p), "bytes": [56]}
            rows.append(
                {
                    "query_id": f"q{q}",
                    "model": model,
                    "correct": float(right),
                    "prompt_tokens": 40,
                    "completion_tokens": 3 if model != STRONG else 30,
                    "logprobs": [{**token, "top_logprobs": [token, alternative]}],
                }
            )
    return rows


def test_complete_queries_drops_the_ones_still_being_collected(tmp_path: Path) -> None:
    rows = _runs_rows(5)[:-1]  # the last query lacks its third row
    source = tmp_path / "runs.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    count, models = complete_queries(source, tmp_path / "complete.jsonl")
    assert (count, models) == (4, sorted([CHEAP, MIDDLE, STRONG]))
    kept = [json.loads(line) for line in (tmp_path / "complete.jsonl").read_text().splitlines()]
    assert len(kept) == 12 and {r["query_id"] for r in kept} == {"q0", "q1", "q2", "q3"}


def test_a_source_calibrated_from_runs_gives_a_servable_starting_policy(
    tmp_path: Path, manifest: Manifest, repo_root: Path
) -> None:
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(json.dumps(r) + "\n" for r in _runs_rows(120)))
    tiers = source_tiers(runs)
    target = tiers["tiers"][TIER]["min_quality"]
    assert 0.6 < target < 0.85  # halfway between the cheap and the strong member's accuracy
    (tmp_path / "tiers.yaml").write_text(yaml.safe_dump(tiers))
    sheet = price_sheet(manifest, [CHEAP, MIDDLE, STRONG])
    assert sheet["models"][STRONG] == manifest.models["qwen2.5-coder-1.5b"].price.model_dump(
        exclude_none=True
    )
    (tmp_path / "prices.yaml").write_text(yaml.safe_dump(sheet))
    command = calibrate_command(
        runs, tmp_path / "tiers.yaml", tmp_path / "prices.yaml", tmp_path / "source.json"
    )
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=repo_root)
    assert result.returncode == 0, result.stdout + result.stderr
    policy = never_escalating_policy(load_policy(tmp_path / "source.json"))
    assert policy.tiers[TIER].routes[0].models == [CHEAP, STRONG]
    check_servable(policy, [CHEAP, MIDDLE, STRONG])


def test_the_source_is_the_demo_policy_only_when_it_names_pool_members(
    tmp_path: Path, manifest: Manifest
) -> None:
    (tmp_path / "policies").mkdir()
    with pytest.raises(StartingPolicyError, match="no source for the starting policy"):
        source_policy_file(tmp_path, manifest)
    not_members = build_policy(
        {
            "schema_version": 1,
            "models": {"small": {"mean_cost_usd": 1e-6, "quality": 0.2}},
            "default_tier": "t",
            "tiers": {
                "t": {
                    "objective": {"max_cost_usd": 1e-5},
                    "routes": [{"models": ["small"]}],
                    "expected": {"cost_usd": 1e-6, "quality": 0.2, "escalation_rate": 0.0},
                }
            },
        }
    )
    save_policy(not_members, tmp_path / "policies" / "local-demo.json")
    assert not names_members(not_members, manifest)
    (tmp_path / "data" / "local").mkdir(parents=True)
    (tmp_path / "data" / "local" / "arithmetic-runs.jsonl").write_text("")
    assert source_policy_file(tmp_path, manifest) == ("runs", tmp_path / "data/local/arithmetic-runs.jsonl")
    members = _source({CHEAP: BINS})
    assert names_members(members, manifest)
    save_policy(members, tmp_path / "policies" / "local-demo.json")
    assert source_policy_file(tmp_path, manifest) == ("demo", tmp_path / "policies/local-demo.json")


def test_metric_reads_sum_matching_samples_and_keep_nan() -> None:
    text = (
        "# TYPE cascade_shadow_calls counter\n"
        'cascade_shadow_calls_total{model="a",outcome="ok"} 3\n'
        'cascade_shadow_calls_total{model="a",outcome="failed"} 1\n'
        'cascade_shadow_calls_total{model="b",outcome="ok"} 2\n'
        "# TYPE cascade_score_drift_psi gauge\n"
        'cascade_score_drift_psi{tier="t",model="a"} NaN\n'
    )
    samples = parse_metrics(text)
    assert metric_value(samples, "cascade_shadow_calls_total") == 6
    assert metric_value(samples, "cascade_shadow_calls_total", model="a") == 4
    assert metric_value(samples, "cascade_shadow_calls_total", model="a", outcome="ok") == 3
    assert metric_value(samples, "cascade_shadow_calls_total", model="c") == 0
    assert math.isnan(metric_value(samples, "cascade_score_drift_psi", tier="t", model="a"))
