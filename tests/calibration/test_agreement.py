"""Cohen's kappa of correctness between models, and the warning for a model unrelated to all others."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from calibration.agreement import correctness_kappa, unrelated_model_warnings
from calibration.runs import load_runs
from tests.support.data_files import PLAUT_PRICES, PLAUT_RUNS


def related_models(n: int = 4000, k: int = 4, seed: int = 0) -> np.ndarray:
    """k models whose correctness depends on a shared per-query difficulty (as real models do)."""
    rng = np.random.default_rng(seed)
    difficulty = rng.random(n)
    skill = np.linspace(0.4, 0.8, k)
    return (rng.random((n, k)) * 0.5 + difficulty[:, None] * 0.5 < skill).astype(float)


def test_kappa_matches_scikit_learn_and_is_symmetric() -> None:
    quality = related_models()
    kappa = correctness_kappa(quality)
    assert np.allclose(kappa, kappa.T) and np.allclose(np.diag(kappa), 1.0)
    for a, b in ((0, 1), (1, 3), (0, 3)):
        assert kappa[a, b] == pytest.approx(cohen_kappa_score(quality[:, a], quality[:, b]))


def test_a_shuffled_model_is_flagged_and_aligned_ones_are_not() -> None:
    quality = related_models()
    models = ("a", "b", "c", "d")
    assert unrelated_model_warnings(models, quality) == []
    quality[:, 2] = np.random.default_rng(1).permutation(quality[:, 2])  # rows no longer aligned
    (warning,) = unrelated_model_warnings(models, quality)
    assert warning.startswith("model 'c': its correctness is unrelated to every other model's")
    assert "not aligned with the same queries" in warning


def test_an_aligned_model_near_the_ceiling_is_not_flagged_but_a_shuffled_one_is() -> None:
    """A model right on 97% of the questions can hardly agree beyond chance with weaker ones (raw kappa
    near 0.05); it is judged relative to the largest kappa its accuracy allows."""
    rng = np.random.default_rng(2)
    n = 4000
    difficulty = rng.random(n)
    noise = rng.random((n, 4)) * 0.5 + difficulty[:, None] * 0.5
    quality = (noise < np.array([0.5, 0.55, 0.6, 0.88])).astype(float)
    models = ("a", "b", "c", "strong")
    assert quality[:, 3].mean() > 0.95
    assert np.nanmax(np.abs(correctness_kappa(quality)[3, :3])) < 0.1  # raw kappa alone would flag it
    assert unrelated_model_warnings(models, quality) == []
    quality[:, 3] = rng.permutation(quality[:, 3])
    (warning,) = unrelated_model_warnings(models, quality)
    assert warning.startswith("model 'strong'")


def test_plaut_mc_misaligned_model_would_be_caught() -> None:
    """On real MMLU runs: nothing above chance is flagged; a strong model with shuffled rows is."""
    matrix = load_runs(
        PLAUT_RUNS,
        prices=PLAUT_PRICES,
        score_column="score_msp",
        where={"dataset": "mmlu", "prompt_variant": "first"},
    )
    flagged = [w.split("'")[1] for w in unrelated_model_warnings(matrix.models, matrix.quality)]
    assert flagged == ["Falcon-7b"]  # accuracy 0.26 on four options: it guesses
    quality = matrix.quality.copy()
    strong = matrix.models.index("gpt-3.5-turbo")
    quality[:, strong] = np.random.default_rng(0).permutation(quality[:, strong])
    flagged = [w.split("'")[1] for w in unrelated_model_warnings(matrix.models, quality)]
    assert flagged == ["Falcon-7b", "gpt-3.5-turbo"]
