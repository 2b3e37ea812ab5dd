"""A threshold must lie within its scorer's range: outside it, it escalates every answer or none."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

from policies import SCORERS, PolicyInvalidError, build_policy, parse_policy, score_logprobs
from policies.scorers import BLACKBOX_SCORERS, FITTED_SCORERS, SCORE_RANGES

# The settings each black-box scorer needs (policies.schema.ScorerSpec) to be a valid scorer.
_SETTINGS: dict[str, dict[str, Any]] = {
    "verifier": {"verifier": {"model": "judge"}},
    "consistency": {"samples": 3, "temperature": 0.7, "equivalence": "numeric"},
}


def _with(document: dict[str, Any], scorer: str, threshold: float, where: str = "tier") -> dict[str, Any]:
    document = json.loads(json.dumps(document))
    document["scorer"] = {**document["scorer"], "name": scorer, **_SETTINGS.get(scorer, {})}
    inside = -1.0 if scorer == "mean_logprob" else 0.5  # every other threshold valid for this scorer
    for chain in [r for t in document["tiers"].values() for r in t["routes"]] + document["envelope"]:
        chain["thresholds"] = [inside] * len(chain["thresholds"])
    if where == "tier":
        document["tiers"]["balanced"]["routes"][0]["thresholds"] = [threshold]
    else:
        document["envelope"][1]["thresholds"] = [threshold]
    return document


def _random_content(rng: random.Random) -> list[dict[str, Any]]:
    """Token entries with random alternatives, some certain (logprob 0), some -inf, some missing."""
    content = []
    for _ in range(rng.randint(1, 12)):
        raw = sorted(rng.choice([0.0, -math.inf, -rng.expovariate(0.3)]) for _ in range(rng.randint(0, 6)))
        alternatives = [{"token": f"t{i}", "logprob": value} for i, value in enumerate(reversed(raw))]
        chosen = alternatives[0]["logprob"] if alternatives else -rng.expovariate(0.5)
        content.append({"token": "x", "logprob": chosen, "top_logprobs": alternatives})
    return content


def test_every_computable_scorer_declares_a_range_its_scores_stay_in() -> None:
    assert set(SCORE_RANGES) == set(SCORERS) | set(BLACKBOX_SCORERS) | set(FITTED_SCORERS)
    rng = random.Random(16)
    seen: dict[str, list[float]] = {name: [] for name in SCORERS}
    for _ in range(2000):
        content = _random_content(rng)
        for name in SCORERS:
            score = score_logprobs(content, name, top_k=rng.randint(1, 20))
            if score is not None:
                seen[name].append(score)
    for name, scores in seen.items():
        low, high = SCORE_RANGES[name]
        assert scores, name
        assert low <= min(scores) and max(scores) <= high, (name, min(scores), max(scores))
        if math.isfinite(low):
            assert min(scores) == low, name  # the range is tight: the generator reaches both ends
        assert max(scores) == high, name


# A fitted scorer is a tier's own, never the section's (its range check: tests/policies/test_benefit.py).
@pytest.mark.parametrize("scorer", sorted(set(SCORE_RANGES) - set(FITTED_SCORERS)))
@pytest.mark.parametrize("where", ["tier", "envelope"])
def test_a_threshold_outside_the_scorers_range_is_refused_with_a_reason_naming_it(
    policy_document: dict[str, Any], scorer: str, where: str
) -> None:
    low, high = SCORE_RANGES[scorer]
    outside = [high + 1.0, 2.0 if high < 2.0 else None, low - 5.0 if math.isfinite(low) else None]
    for threshold in [t for t in outside if t is not None]:
        document = _with(policy_document, scorer, threshold, where)
        with pytest.raises(PolicyInvalidError) as caught:
            parse_policy(json.dumps({**document, "policy_id": "x", "created_at": "t"}), source="p.json")
        message = str(caught.value)
        assert "\n" not in message
        place = "tier 'balanced' route 1 stage 1 (small)" if where == "tier" else "envelope point 2 stage 1"
        assert place in message
        assert f"threshold {threshold:g}" in message
        assert f"range [{low:g}, {high:g}] of scorer {scorer}" in message


@pytest.mark.parametrize("scorer", sorted(set(SCORE_RANGES) - set(FITTED_SCORERS)))
def test_thresholds_at_the_ends_of_the_range_are_served(policy_document: dict[str, Any], scorer: str) -> None:
    low, high = SCORE_RANGES[scorer]
    # the top, the next float above it (calibration's "escalate every answer") and the bottom
    ends = [high, math.nextafter(high, math.inf), low if math.isfinite(low) else -1e6]
    for threshold in ends:
        policy = build_policy(_with(policy_document, scorer, threshold))
        assert policy.tiers["balanced"].routes[0].thresholds == [threshold]


def test_an_external_score_has_no_known_range_and_any_finite_threshold_is_kept(
    policy_document: dict[str, Any],
) -> None:
    policy = build_policy(_with(policy_document, "external", 37.5))
    assert policy.tiers["balanced"].routes[0].thresholds == [37.5]
