"""The policy's optional score_distribution: validation, binning, PSI math, policy_id stability."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import numpy as np
import pytest

from policies import PolicyInvalidError, build_policy, dump_policy, parse_policy
from policies.score_distribution import (
    bin_counts,
    bin_index,
    decile_edges,
    population_stability_index,
)


def _distribution() -> dict[str, Any]:
    return {
        "calibration_rows": 200,
        "models": {"small": {"edges": [0.2, 0.5, 0.8], "proportions": [0.25, 0.25, 0.25, 0.25]}},
        "tiers": {"balanced": {"small": [0.1, 0.2, 0.3, 0.4]}},
    }


# --- PSI math -----------------------------------------------------------------------------------


def test_psi_of_identical_distributions_is_zero() -> None:
    assert population_stability_index([25, 25, 50], [0.25, 0.25, 0.5]) == pytest.approx(0.0, abs=1e-12)


def test_psi_of_a_known_shift_matches_the_closed_form() -> None:
    # Expected 50/50, observed 90/10: 0.4 ln(0.9/0.5) + (-0.4) ln(0.1/0.5) = 0.8789...
    expected = 0.4 * math.log(1.8) - 0.4 * math.log(0.2)
    assert population_stability_index([90, 10], [0.5, 0.5]) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(0.87889, abs=1e-5)


def test_psi_is_symmetric_in_its_two_distributions() -> None:
    a, b = [0.1, 0.2, 0.7], [0.3, 0.3, 0.4]
    assert population_stability_index(a, b) == pytest.approx(population_stability_index(b, a))


def test_psi_replaces_an_empty_bin_by_epsilon() -> None:
    # Observed nothing in a bin expected to hold 20%: (1e-4 - 0.2) ln(1e-4 / 0.2) + rest.
    value = population_stability_index([0, 100], [0.2, 0.8], epsilon=1e-4)
    by_hand = (1e-4 - 0.2) * math.log(1e-4 / 0.2) + (1.0 - 0.8) * math.log(1.0 / 0.8)
    assert value == pytest.approx(by_hand, rel=1e-12)
    assert math.isfinite(population_stability_index([10, 0], [1.0, 0.0]))


def test_psi_without_observations_is_nan_and_mismatched_bins_are_an_error() -> None:
    assert math.isnan(population_stability_index([0, 0], [0.5, 0.5]))
    with pytest.raises(ValueError, match="same bins"):
        population_stability_index([1, 2, 3], [0.5, 0.5])


def test_psi_of_samples_from_shifted_normals_is_large_and_of_the_same_normal_small() -> None:
    rng = np.random.default_rng(7)
    calibration = rng.normal(0.0, 1.0, 20_000)
    edges = decile_edges(calibration)
    expected = bin_counts(edges, calibration) / calibration.size
    same = population_stability_index(bin_counts(edges, rng.normal(0.0, 1.0, 5_000)), expected)
    shifted = population_stability_index(bin_counts(edges, rng.normal(1.0, 1.0, 5_000)), expected)
    assert same < 0.01
    # PSI of N(0,1) vs N(1,1) is their symmetric KL divergence (mu^2 = 1) less binning loss.
    assert 0.7 < shifted < 1.0


# --- binning ------------------------------------------------------------------------------------


def test_decile_edges_split_distinct_scores_into_ten_equal_bins() -> None:
    scores = np.arange(100, dtype=float)
    edges = decile_edges(scores)
    assert len(edges) == 9
    assert bin_counts(edges, scores).tolist() == [10.0] * 10


def test_tied_scores_collapse_into_fewer_increasing_edges() -> None:
    scores = np.array([1.0] * 60 + list(np.linspace(0, 0.5, 40)))
    edges = decile_edges(scores)
    assert edges == sorted(set(edges)) and edges[-1] == 1.0 and len(edges) < 9
    assert bin_counts(edges, scores)[-1] == 60.0


def test_bin_index_agrees_with_vectorized_binning_including_scores_outside_the_range() -> None:
    edges = [0.2, 0.5, 0.8]
    scores = [-3.0, 0.0, 0.2, 0.49, 0.5, 0.8, 0.99, 7.0]
    by_one = np.bincount([bin_index(edges, s) for s in scores], minlength=4)
    assert by_one.tolist() == bin_counts(edges, np.array(scores)).tolist() == [2, 2, 1, 3]


def test_decile_edges_refuse_empty_or_non_finite_scores() -> None:
    with pytest.raises(ValueError):
        decile_edges(np.array([]))
    with pytest.raises(ValueError):
        decile_edges(np.array([0.1, np.nan]))


# --- the policy field ---------------------------------------------------------------------------


def test_a_policy_with_a_score_distribution_is_valid_and_round_trips(policy_document) -> None:
    policy = build_policy({**policy_document, "score_distribution": _distribution()})
    again = parse_policy(dump_policy(policy))
    assert again == policy
    assert again.score_distribution is not None
    assert again.score_distribution.tiers["balanced"]["small"] == [0.1, 0.2, 0.3, 0.4]


def test_an_older_policy_without_the_field_keeps_its_bytes_and_policy_id(policy_document) -> None:
    policy = build_policy({**policy_document, "created_at": "2026-01-01T00:00:00+00:00"})
    assert policy.score_distribution is None
    assert "score_distribution" not in dump_policy(policy)
    # The contract's hash, computed here by hand over the fields a version-1 policy had before.
    old_fields = policy.model_dump(mode="json")
    for name in ("policy_id", "created_at", "score_distribution", "kinds"):
        old_fields.pop(name)
    for tier in old_fields["tiers"].values():
        tier["expected"].pop("heldout")
    old_fields["scorer"].pop("tokens")
    canonical = json.dumps(old_fields, sort_keys=True, separators=(",", ":"))
    assert policy.policy_id == hashlib.sha256(canonical.encode()).hexdigest()[:16]
    with_field = build_policy({**policy_document, "score_distribution": _distribution()})
    assert with_field.policy_id != policy.policy_id


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["models"]["small"].update(edges=[0.2, 0.2, 0.8]), "strictly increasing"),
        (lambda d: d["models"]["small"].update(edges=[0.2, 0.5, 0.7, 0.9]), "make 5 bins"),
        (lambda d: d["models"]["small"].update(edges=[i / 200 for i in range(100)]), "at most 99"),
        (lambda d: d["models"]["small"].update(proportions=[0.5, 0.5, 0.5, -0.5]), r"\[0, 1\]"),
        (lambda d: d["models"]["small"].update(proportions=[0.3, 0.3, 0.3, 0.3]), "sum to 1"),
        (lambda d: d["tiers"]["balanced"].update(small=[0.5, 0.5]), "needs 4 proportions"),
        (lambda d: d["tiers"]["balanced"].update(large=[0.5, 0.5]), "has no bin edges"),
        (lambda d: d["tiers"].update(premium={"small": [0.25] * 4}), "unknown tier"),
        (lambda d: d["models"].update(tiny={"edges": [0.1], "proportions": [0.5, 0.5]}), "unknown model"),
        (lambda d: d.update(calibration_rows=0), "greater than or equal to 1"),
        (lambda d: d.update(extra=1), "Extra inputs"),
    ],
)
def test_an_invalid_score_distribution_is_rejected(policy_document, change, message) -> None:
    distribution = _distribution()
    change(distribution)
    with pytest.raises(PolicyInvalidError, match=message):
        build_policy({**policy_document, "score_distribution": distribution})


def test_non_finite_edges_are_rejected(policy_document) -> None:
    distribution = _distribution()
    distribution["models"]["small"]["edges"] = [0.2, 0.5, float("inf")]
    with pytest.raises(PolicyInvalidError, match="finite"):
        build_policy({**policy_document, "score_distribution": distribution})
    # And a NaN edge written in a file (Python's json reads the NaN literal).
    valid = build_policy({**policy_document, "score_distribution": _distribution()})
    document = json.loads(dump_policy(valid))
    document["score_distribution"]["models"]["small"]["edges"][0] = math.nan
    text = json.dumps(document)
    assert "NaN" in text
    with pytest.raises(PolicyInvalidError, match="finite"):
        parse_policy(text)
