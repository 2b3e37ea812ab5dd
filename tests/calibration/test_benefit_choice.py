"""``cascade calibrate --benefit-scorer``: a two-stage tier takes the benefit scorer only where it
wins held out, and then serves a valid policy tier (its own scorer, bounds, shift reference)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from calibration.bounds import BoundSettings
from calibration.heldout_expected import HeldoutSettings
from calibration.policy.benefit_choice import BenefitSettings
from calibration.policy.calibrate import calibrate
from calibration.runs import RunsMatrix
from calibration.tiers import TierObjective, TiersSpec
from policies.benefit import FEATURES
from tests.calibration.calibrate_command import calibrate as calibrate_command

# A budget above what escalating every query escalation helps costs (1e-5 + 0.36 x 1e-4): a tier
# that knows where it helps need not spend it all, so its held-out cost stays within it.
SPEC = TiersSpec("mid", {"mid": TierObjective(max_cost_usd=6e-5)})


def two_models(signal: float, n: int = 400, seed: int = 0) -> RunsMatrix:
    """``cheap`` ($1e-5, right 60%) and ``strong`` ($1e-4, right 90%); the cheap model's score is
    noise, and its first answer feature tells where escalation helps with strength ``signal``."""
    rng = np.random.default_rng(seed)
    cheap = rng.random(n) < 0.6
    strong = rng.random(n) < 0.9
    helps = strong & ~cheap
    features = rng.normal(size=(n, len(FEATURES)))
    features[:, 0] += signal * np.where(helps, -1.0, 1.0)
    return RunsMatrix(
        models=("cheap", "strong"),
        query_ids=np.array([f"q{i}" for i in range(n)]),
        quality=np.column_stack([cheap, strong]).astype(float),
        cost=np.tile([1e-5, 1e-4], (n, 1)),
        score=np.column_stack([rng.random(n), rng.random(n)]).round(4),
        scorer="mean_token_negentropy",
        top_k=15,
        answer_features={"cheap": features, "strong": rng.normal(size=(n, len(FEATURES)))},
    )


def run(matrix: RunsMatrix, bounds: BoundSettings | None = None):
    return calibrate(
        matrix, SPEC, heldout=HeldoutSettings(splits=20), bounds=bounds, benefit=BenefitSettings()
    )


def test_a_tier_takes_the_benefit_scorer_where_it_wins_held_out() -> None:
    calibrated = run(two_models(signal=4.0), BoundSettings(alternatives=2))
    choice = calibrated.benefit["mid"]  # type: ignore[index]
    assert choice.chosen and choice.pair == ("cheap", "strong")
    compared = choice.compared
    assert compared["escalation_benefit"]["quality"] > compared["section"]["quality"] + 0.05
    tier = calibrated.policy.tiers["mid"]
    assert tier.scorer is not None and tier.scorer.benefit is not None
    assert tier.scorer.benefit.scored == "cheap" and tier.routes[0].models == ["cheap", "strong"]
    assert tier.expected.heldout is not None and tier.expected.bounds is not None
    assert tier.expected.bounds.statements == 8
    assert calibrated.policy.shift_reference is not None and "mid" in calibrated.policy.shift_reference.tiers
    distribution = calibrated.policy.score_distribution
    assert distribution is None or "mid" not in distribution.tiers


def test_without_signal_the_section_scorer_stays() -> None:
    calibrated = run(two_models(signal=0.0))
    choice = calibrated.benefit["mid"]  # type: ignore[index]
    assert not choice.chosen and choice.compared is not None
    assert calibrated.policy.tiers["mid"].scorer is None


def test_runs_without_logprobs_are_no_candidates() -> None:
    calibrated = run(replace(two_models(signal=2.0), answer_features=None))
    choice = calibrated.benefit["mid"]  # type: ignore[index]
    assert not choice.chosen and choice.note is not None and "no answer features" in choice.note


def test_the_command_serves_it_on_the_arithmetic_runs_economy_tier(tmp_path: Path) -> None:
    output = tmp_path / "policy.json"
    result = calibrate_command(
        Path("data/local/arithmetic-runs.jsonl.gz"),
        "--tiers",
        Path("data/local/arithmetic-tiers.yaml"),
        "-o",
        output,
        "--benefit-scorer",
        "--heldout-splits",
        "20",
    )
    assert result.exit_code == 0, result.output
    assert "Scorer per tier" in result.output
    tiers = json.loads(output.read_text())["tiers"]
    economy = tiers["economy"]
    assert economy["scorer"]["name"] == "escalation_benefit"
    assert economy["scorer"]["benefit"]["scored"] == "qwen0.5b-fast"
    assert economy["routes"][0]["models"] == ["qwen0.5b-fast", "qwen1.5b-fast"]
    assert "scorer" not in tiers["quality"]
    assert economy["expected"]["bounds"]["statements"] == 8


@pytest.mark.parametrize("flag", ["--no-heldout"])
def test_the_benefit_scorer_needs_held_out_splits(tmp_path: Path, flag: str) -> None:
    result = calibrate_command(
        Path("data/local/arithmetic-runs.jsonl.gz"),
        "--tiers",
        Path("data/local/arithmetic-tiers.yaml"),
        "-o",
        tmp_path / "p.json",
        "--benefit-scorer",
        flag,
    )
    assert result.exit_code != 0 and "held-out" in result.output
