"""Do the models' rows answer the same queries? Cohen's kappa of correctness between models.

Models that are better than guessing find the same questions hard, so their correctness agrees
beyond chance (on plaut-mc MMLU, median kappa 0.23-0.42 per model). A model whose correctness is
unrelated to every other model's either guesses, or its rows are not aligned with the others'
query by query (a join or row-order fault in the data). A misaligned model errs as if
independently of the rest, which makes every cascade through it look far better than any real
cascade can, so calibration warns about it rather than trusting the envelope.

Kappa is bounded by the two models' accuracies: a model that is right on 97% of the questions can
agree with a 57% model only so far beyond chance (its largest possible kappa is about 0.05). So a
model is judged by its kappa *relative to that largest possible value* (kappa / kappa_max), which
keeps a strong, aligned model near the ceiling from looking unrelated.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

# A model is flagged when its |kappa| with every other model stays below UNRELATED_KAPPA of the
# largest kappa their accuracies allow, while the other models do find a partner: the median, over
# them, of their largest kappa with anyone else is PEER_AGREEMENT or more. (A negative kappa is a
# relation too, e.g. opposite letter biases on a two-option task, so it does not count as
# unrelated.) Relative kappa is noisier than kappa when the largest possible value is small, hence
# a threshold of 0.2 of it, where aligned models on real data sit at 0.4 and more.
UNRELATED_KAPPA = 0.2
PEER_AGREEMENT = 0.25


def correctness_kappa(quality: np.ndarray) -> np.ndarray:
    """(k, k) Cohen's kappa of correctness (quality >= 0.5) between the k columns of ``quality``
    (n queries x k models); the diagonal is 1, NaN where a model is always right or always wrong."""
    correct = (np.asarray(quality) >= 0.5).astype(np.float64)
    n = correct.shape[0]
    right = correct.mean(axis=0)
    agree = (correct.T @ correct + (1 - correct).T @ (1 - correct)) / n
    chance = np.outer(right, right) + np.outer(1 - right, 1 - right)
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = (agree - chance) / (1 - chance)
    np.fill_diagonal(kappa, 1.0)
    return kappa


def max_kappa(quality: np.ndarray) -> np.ndarray:
    """(k, k) the largest Cohen's kappa that the columns' accuracies allow (perfectly nested errors);
    NaN where a model is always right or always wrong."""
    right = (np.asarray(quality) >= 0.5).mean(axis=0)
    best_agree = 1.0 - np.abs(right[:, None] - right[None, :])
    chance = np.outer(right, right) + np.outer(1 - right, 1 - right)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (best_agree - chance) / (1 - chance)


def unrelated_model_warnings(models: Sequence[str], quality: np.ndarray) -> list[str]:
    """One warning per model whose correctness is unrelated to every other model's (see module)."""
    if len(models) < 3:
        return []
    kappa = correctness_kappa(quality)
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = kappa / max_kappa(quality)
    found = []
    for j, name in enumerate(models):
        others = [i for i in range(len(models)) if i != j]
        with_others = kappa[j, others]
        if np.isnan(relative[j, others]).all() or np.nanmax(np.abs(relative[j, others])) >= UNRELATED_KAPPA:
            continue
        among = kappa[np.ix_(others, others)]
        np.fill_diagonal(among, np.nan)
        with warnings.catch_warnings():  # a model always right has an all-NaN row
            warnings.simplefilter("ignore", RuntimeWarning)
            partner = np.nanmax(among, axis=1)  # each other model's best agreement with the rest
        if not np.isfinite(partner).any() or np.nanmedian(partner) < PEER_AGREEMENT:
            continue
        found.append(
            f"model '{name}': its correctness is unrelated to every other model's (Cohen's kappa "
            f"{np.nanmin(with_others):.2f} to {np.nanmax(with_others):.2f}, at most "
            f"{np.nanmax(np.abs(relative[j, others])):.0%} of what the accuracies allow, while the others' "
            "best "
            f"agreement has a median of {np.nanmedian(partner):.2f}): a model that guesses looks like "
            "this, and so does one whose rows are not aligned with the same queries, which makes "
            "cascades through it look better than they are"
        )
    return found
