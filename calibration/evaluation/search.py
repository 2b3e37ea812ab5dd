"""Threshold and model-sequence search for multi-stage chains: random search and Optuna NSGA-II.

A search space is a list of model sequences (each a cost-ordered chain); a trial picks a
sequence and k-1 normalized coordinates ``u`` in [0, 1], mapped to thresholds as quantiles of
each stage's calibration scores (``ChainScorer``). Trials are scored in
batches with the vectorized ``chain_outcomes``: NSGA-II asks one whole generation, scores it and
tells it back, so the Python work per trial is Optuna's bookkeeping only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from calibration.evaluation.candidates import Candidates
from calibration.evaluation.chains import chain_outcomes
from calibration.runs import RunsMatrix

ProgressCallback = Callable[[int], None]


@dataclass(frozen=True)
class ChainSpace:
    """Model sequences a search may choose from; ``max_stages`` = length of the longest."""

    sequences: Sequence[tuple[str, ...]]

    @property
    def max_stages(self) -> int:
        return max(len(sequence) for sequence in self.sequences)


class ChainScorer:
    """Scores trials ``(sequence index (T,), u (T, max_stages - 1))`` on a fixed set of rows."""

    def __init__(self, matrix: RunsMatrix, rows: np.ndarray, space: ChainSpace):
        self.matrix = matrix
        self.rows = np.asarray(rows)
        self.space = space
        # The rows' outcomes, gathered once; each sequence then only takes columns.
        self._score = matrix.score[self.rows]
        self._cost = matrix.cost[self.rows]
        self._quality = matrix.quality[self.rows]
        # Sorted calibration scores per model: quantile -> threshold by interpolation, no re-sorting.
        # Finite ones only: a -inf score (a structurally invalid answer) is never a threshold, so
        # even the lowest threshold escalates it.
        self._sorted_scores = {
            name: _finite_sorted(matrix.score[self.rows, matrix.model_index(name)])
            for name in {name for sequence in space.sequences for name in sequence}
        }

    def thresholds(self, sequence: tuple[str, ...], u: np.ndarray) -> np.ndarray:
        """``(T, len(sequence) - 1)`` score thresholds from normalized coordinates ``u`` (T, >=k-1)."""
        out = np.empty((u.shape[0], len(sequence) - 1))
        for stage, name in enumerate(sequence[:-1]):
            ordered = self._sorted_scores[name]
            out[:, stage] = np.interp(u[:, stage] * (ordered.size - 1), np.arange(ordered.size), ordered)
        return out

    def score(self, sequence_index: np.ndarray, u: np.ndarray) -> Candidates:
        """Mean calibration cost and quality of every trial, with its route."""
        sequence_index = np.asarray(sequence_index)
        cost = np.empty(sequence_index.size)
        quality = np.empty(sequence_index.size)
        routes: list = [None] * sequence_index.size
        for index in np.unique(sequence_index):
            members = np.flatnonzero(sequence_index == index)
            sequence = tuple(self.space.sequences[index])
            thresholds = self.thresholds(sequence, u[members])
            columns = [self.matrix.model_index(name) for name in sequence]
            cost[members], quality[members], _ = chain_outcomes(
                self._score[:, columns],
                self._cost[:, columns],
                self._quality[:, columns],
                thresholds,
                scoring=self.matrix.scoring(self.rows, columns),
                saving=self.matrix.saving(self.rows, columns),
            )
            for member, row in zip(members, thresholds, strict=True):
                routes[member] = (sequence, tuple(float(t) for t in row))
        return Candidates(routes, cost, quality)


def _finite_sorted(scores: np.ndarray) -> np.ndarray:
    """The finite scores, sorted; ``[0.0]`` when there are none (every threshold then escalates all)."""
    finite = np.sort(scores[np.isfinite(scores)])
    return finite if finite.size else np.zeros(1)


def random_search(
    scorer: ChainScorer, trials: int, seed: int, on_progress: ProgressCallback | None = None
) -> Candidates:
    """``trials`` uniform draws of (sequence, u), scored in one vectorized batch."""
    rng = np.random.default_rng(seed)
    sequence_index = rng.integers(0, len(scorer.space.sequences), size=trials)
    u = rng.random((trials, max(1, scorer.space.max_stages - 1)))
    candidates = scorer.score(sequence_index, u)
    if on_progress is not None:
        on_progress(trials)
    return candidates


def population_size_for(trials: int) -> int:
    """NSGA-II population: a tenth of the trials, within [10, 100] (the paper: 100 for 2,000)."""
    return int(min(100, max(10, trials // 10)))


def nsga2_search(
    scorer: ChainScorer, trials: int, seed: int, on_progress: ProgressCallback | None = None
) -> Candidates:
    """Optuna NSGA-II over (sequence, u) minimizing (cost, -quality) on the scorer's rows.

    Returns every trial (not only the Pareto set): the budget choice downstream picks the best
    within each budget, which only Pareto trials can win anyway.
    """
    import optuna
    from optuna.distributions import FloatDistribution, IntDistribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    n_sequences = len(scorer.space.sequences)
    n_coordinates = max(1, scorer.space.max_stages - 1)
    distributions: dict = {f"u{i}": FloatDistribution(0.0, 1.0) for i in range(n_coordinates)}
    if n_sequences > 1:
        # An integer index behaves like a categorical under NSGA-II's default uniform crossover
        # (values are swapped, mutation redraws at random) and is far cheaper for Optuna to compare.
        distributions["sequence"] = IntDistribution(0, n_sequences - 1)
    population = population_size_for(trials)
    sampler = optuna.samplers.NSGAIISampler(population_size=population, seed=seed)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)

    parts: list[Candidates] = []
    done = 0
    while done < trials:
        batch = [study.ask(distributions) for _ in range(min(population, trials - done))]
        sequence_index = np.array([trial.params.get("sequence", 0) for trial in batch])
        u = np.array([[trial.params[f"u{i}"] for i in range(n_coordinates)] for trial in batch])
        scored = scorer.score(sequence_index, u)
        for trial, cost, quality in zip(batch, scored.cost, scored.quality, strict=True):
            study.tell(trial, [float(cost), -float(quality)])
        parts.append(scored)
        done += len(batch)
        if on_progress is not None:
            on_progress(len(batch))
    return Candidates(
        [route for part in parts for route in part.routes],
        np.concatenate([part.cost for part in parts]),
        np.concatenate([part.quality for part in parts]),
    )


SEARCHES: dict[str, Callable[..., Candidates]] = {"nsga2": nsga2_search, "random": random_search}
