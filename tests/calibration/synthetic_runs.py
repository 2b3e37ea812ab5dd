"""Random RunsMatrix objects with a known structure, for evaluation tests."""

from __future__ import annotations

import numpy as np

from calibration.runs import RunsMatrix


def random_matrix(
    n: int = 400,
    k: int = 4,
    seed: int = 0,
    *,
    strata: bool = False,
    features: bool = False,
    varying_cost: bool = False,
) -> RunsMatrix:
    """``k`` models, costs 1e-5 * 2**j, accuracy rising with cost, informative scores.

    Model j is correct when a per-query difficulty is below its skill, with noise; its score
    is a noisy version of its own correctness, so cascades help. ``features`` adds the
    (noisy) difficulty as a per-query feature; ``strata`` labels queries 'a'/'b' (1:3).
    """
    rng = np.random.default_rng(seed)
    difficulty = rng.random(n)
    skill = np.linspace(0.4, 0.85, k)
    correct = (difficulty[:, None] < skill[None, :] + rng.normal(0, 0.15, (n, k))).astype(float)
    score = np.clip(0.5 * correct + rng.normal(0.25, 0.2, (n, k)), 0, 1).round(3)
    cost = np.tile(1e-5 * 2.0 ** np.arange(k), (n, 1))
    if varying_cost:
        cost = cost * rng.uniform(0.5, 1.5, (n, k))
    return RunsMatrix(
        models=tuple(f"m{j}" for j in range(k)),
        query_ids=np.array([f"q{i}" for i in range(n)]),
        quality=correct,
        cost=cost,
        score=score,
        strata=np.where(np.arange(n) % 4 == 0, "a", "b") if strata else None,
        features=(difficulty + rng.normal(0, 0.05, n))[:, None] if features else None,
    )
