"""Paired percentile bootstrap of many means at once."""

from __future__ import annotations

import numpy as np
import pytest

from stats import bootstrap
from stats.bootstrap import bootstrap_means


def test_intervals_cover_the_true_mean_at_about_their_level() -> None:
    rng = np.random.default_rng(0)
    covered = 0
    trials = 200
    for trial in range(trials):
        sample = (rng.random((150, 1)) < 0.3).astype(float)
        result = bootstrap_means(sample, resamples=400, confidence=0.9, seed=trial)
        covered += int(result.low[0] <= 0.3 <= result.high[0])
    assert 0.82 <= covered / trials <= 0.97


def test_a_paired_difference_is_tighter_than_the_two_separate_intervals() -> None:
    rng = np.random.default_rng(1)
    shared = rng.random(400) < 0.5  # both policies answer most queries the same way
    other = np.where(rng.random(400) < 0.1, ~shared, shared)
    values = np.column_stack([shared, other, shared.astype(float) - other]).astype(float)
    result = bootstrap_means(values, resamples=2000, seed=2)
    assert result.mean[2] == pytest.approx(result.mean[0] - result.mean[1])
    paired_width = result.high[2] - result.low[2]
    separate_width = (result.high[0] - result.low[0]) + (result.high[1] - result.low[1])
    assert paired_width < separate_width / 3


def test_the_same_seed_gives_the_same_intervals_and_chunking_does_not_change_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = np.random.default_rng(3).random((5000, 4))
    chunked = bootstrap_means(values, resamples=1000, seed=7)  # 400 resamples per chunk
    assert np.array_equal(chunked.low, bootstrap_means(values, resamples=1000, seed=7).low)
    monkeypatch.setattr(bootstrap, "_CELLS_PER_CHUNK", 10**9)
    whole = bootstrap_means(values, resamples=1000, seed=7)
    assert np.allclose(chunked.low, whole.low) and np.allclose(chunked.high, whole.high)
    assert np.all(chunked.low <= chunked.mean) and np.all(chunked.mean <= chunked.high)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="n >= 1"):
        bootstrap_means(np.empty((0, 2)))
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_means(np.ones((3, 1)), confidence=1.0)
