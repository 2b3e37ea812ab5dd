"""The held-out protocol of ``cascade evaluate``: splits x methods -> per-split test curves.

For every split, each method builds its candidate routes on the calibration rows, chooses for
each budget on the common cost grid the best calibration candidate within that budget, and is
scored on the test rows (see ``candidates.heldout_curve``). Nothing a method chooses depends on
test rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from calibration.agreement import unrelated_model_warnings
from calibration.diagnostics import PairDiagnostics, model_auroc, pair_diagnostics
from calibration.evaluation.budget import SplitCurve
from calibration.evaluation.fixed_chain import fixed_chain_split_curve
from calibration.evaluation.heldout import envelope_split_curve, hull_split_curve, single_model_split_curve
from calibration.evaluation.hybrid import hybrid_split_curve, linear_router_split_curve
from calibration.evaluation.router import router_split_curve
from calibration.evaluation.subsequence import subsequence_split_curve
from calibration.runs import RunsMatrix
from calibration.splits import Split, stratified_splits

GRID_POINTS = 500

METHOD_LABELS: dict[str, str] = {
    "envelope": "pairwise envelope",
    "envelope_hull": "envelope, hull mixtures",
    "single": "best single model",
    "fixed_chain": "full fixed chain (NSGA-II)",
    "subsequence_nsga2": "optimal subsequence (NSGA-II)",
    "subsequence_random": "optimal subsequence (random search)",
    "router": "pre-generation router (logistic)",
    "hybrid": "route, then cascade (hybrid)",
}
METHOD_SHORT: dict[str, str] = {
    "envelope": "envelope",
    "envelope_hull": "env. hull mix",
    "single": "best single",
    "fixed_chain": "fixed chain",
    "subsequence_nsga2": "subseq. NSGA-II",
    "subsequence_random": "subseq. random",
    "router": "router",
    "hybrid": "hybrid",
}
SEARCHED_METHODS = frozenset({"fixed_chain", "subsequence_nsga2", "subsequence_random"})
Advance = Callable[[str, int], None]


@dataclass(frozen=True)
class EvaluationSettings:
    """Protocol parameters (CLI defaults)."""

    splits: int = 50
    test_fraction: float = 0.5
    seed: int = 0
    trials: int = 200
    methods: tuple[str, ...] = tuple(m for m in METHOD_LABELS if m != "hybrid")  # hybrid: on request
    grid_points: int = GRID_POINTS
    # Principal components the router (and the hybrid's router) keeps of the features, fitted on
    # each split's calibration rows (calibration.routing.fit); None: every feature, standardized.
    router_components: int | None = None


@dataclass(frozen=True)
class MethodResult:
    """Per-split test curves of one method: ``quality`` and ``cost`` are ``(splits, G)``."""

    name: str
    label: str
    quality: np.ndarray
    cost: np.ndarray
    seconds: float
    skipped: str | None = None


@dataclass(frozen=True)
class EvaluationResult:
    """Everything ``cascade evaluate`` reports."""

    settings: EvaluationSettings
    models: tuple[str, ...]
    model_cost: np.ndarray  # (k,) full-data mean cost, USD per query
    model_quality: np.ndarray  # (k,) full-data mean quality
    single_test_quality: np.ndarray  # (splits, k) each model's quality on each test half
    grid: np.ndarray  # (G,) budgets, USD per query
    low: int  # column of the cheapest model (the gain's lower endpoint)
    best: int  # column of the highest-quality model (the upper endpoint)
    methods: dict[str, MethodResult]
    pairs: list[PairDiagnostics]
    auroc: dict[str, float]
    n_queries: int
    n_test: int
    notes: list[str] = field(default_factory=list)


def cost_grid(model_cost: np.ndarray, points: int = GRID_POINTS) -> np.ndarray:
    """``points`` budgets evenly spaced from the cheapest to the most expensive model's mean cost."""
    return np.linspace(float(model_cost.min()), float(model_cost.max()), points)


def endpoints(model_cost: np.ndarray, model_quality: np.ndarray) -> tuple[int, int]:
    """(cheapest model, highest-quality model) columns; ties: better quality, then cheaper."""
    low = int(np.lexsort((-model_quality, model_cost))[0])
    best = int(np.lexsort((model_cost, -model_quality))[0])
    return low, best


def _method_runner(
    name: str,
    matrix: RunsMatrix,
    grid: np.ndarray,
    trials: int,
    advance: Advance,
    components: int | None = None,
) -> Callable[[Split, int], SplitCurve]:
    def progress(count: int) -> None:
        advance(name, count)

    if name == "envelope":
        return lambda split, seed: envelope_split_curve(matrix, split, grid)
    if name == "envelope_hull":
        return lambda split, seed: hull_split_curve(matrix, split, grid)
    if name == "single":
        return lambda split, seed: single_model_split_curve(matrix, split, grid)
    if name == "fixed_chain":
        return lambda split, seed: fixed_chain_split_curve(
            matrix, split, grid, trials=trials, seed=seed, on_progress=progress
        )
    if name in ("subsequence_nsga2", "subsequence_random"):
        search = name.removeprefix("subsequence_")
        return lambda split, seed: subsequence_split_curve(
            matrix, split, grid, trials=trials, seed=seed, search=search, on_progress=progress
        )
    if name == "router" and components is not None:
        return lambda split, seed: linear_router_split_curve(
            matrix, split, grid, components=components, seed=seed
        )
    if name == "router":
        return lambda split, seed: router_split_curve(matrix, split, grid, seed=seed)
    if name == "hybrid":
        return lambda split, seed: hybrid_split_curve(matrix, split, grid, components=components, seed=seed)
    raise ValueError(f"unknown method {name!r}; known: {', '.join(METHOD_LABELS)}")


def runnable_methods(matrix: RunsMatrix, methods: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """(methods to run, {method: why skipped}) — the router and the hybrid need features."""
    unknown = [m for m in methods if m not in METHOD_LABELS]
    if unknown:
        raise ValueError(f"unknown method {unknown[0]!r}; known: {', '.join(METHOD_LABELS)}")
    skipped = {}
    for name in ("router", "hybrid"):
        if name in methods and matrix.features is None:
            skipped[name] = f"skipped: no per-query features (give --feature-columns to run the {name})"
    return [m for m in methods if m not in skipped], skipped


def run_evaluation(
    matrix: RunsMatrix, settings: EvaluationSettings, advance: Advance | None = None
) -> EvaluationResult:
    """Run the held-out protocol. ``advance(method, units)`` reports progress: 0 units when a method
    starts, then one unit per split for unsearched methods, one per trial for searched ones."""
    tick: Advance = advance or (lambda method, units: None)
    model_cost = matrix.cost.mean(axis=0)
    model_quality = matrix.quality.mean(axis=0)
    grid = cost_grid(model_cost, settings.grid_points)
    low, best = endpoints(model_cost, model_quality)
    splits = stratified_splits(
        matrix.n_queries,
        n_splits=settings.splits,
        test_fraction=settings.test_fraction,
        seed=settings.seed,
        strata=matrix.strata,
    )
    split_seeds = np.random.SeedSequence(settings.seed).generate_state(settings.splits)
    to_run, skipped = runnable_methods(matrix, settings.methods)

    results: dict[str, MethodResult] = {}
    shape = (settings.splits, grid.size)
    for name in settings.methods:
        if name in skipped:
            results[name] = MethodResult(
                name, METHOD_LABELS[name], np.full(shape, np.nan), np.full(shape, np.nan), 0.0, skipped[name]
            )
    for name in to_run:
        run = _method_runner(name, matrix, grid, settings.trials, tick, settings.router_components)
        results[name] = _run_on_splits(name, run, splits, split_seeds, shape, tick)

    single_test = np.vstack([matrix.quality[split.test].mean(axis=0) for split in splits])
    notes = list(matrix.notes) + unrelated_model_warnings(matrix.models, matrix.quality)
    notes += [f"{name} {reason}" for name, reason in skipped.items()]
    if settings.test_fraction == 0:
        notes.append("test fraction 0: calibration and test are the same rows (in-sample, not held out)")
    return EvaluationResult(
        settings=settings,
        models=matrix.models,
        model_cost=model_cost,
        model_quality=model_quality,
        single_test_quality=single_test,
        grid=grid,
        low=low,
        best=best,
        methods={name: results[name] for name in settings.methods},
        pairs=pair_diagnostics(matrix, [split.test for split in splits]),
        auroc=model_auroc(matrix),
        n_queries=matrix.n_queries,
        n_test=int(splits[0].test.size),
        notes=notes,
    )


def _run_on_splits(
    name: str,
    run: Callable[[Split, int], SplitCurve],
    splits: Sequence[Split],
    split_seeds: np.ndarray,
    shape: tuple[int, int],
    tick: Advance,
) -> MethodResult:
    """One method's held-out curve on every split (rows of ``shape``), timed."""
    quality = np.full(shape, np.nan)
    cost = np.full(shape, np.nan)
    tick(name, 0)  # the method starts now (progress timers start here)
    started = time.perf_counter()
    for index, split in enumerate(splits):
        curve = run(split, int(split_seeds[index]))
        quality[index], cost[index] = curve.quality, curve.cost
        if name not in SEARCHED_METHODS:
            tick(name, 1)
    return MethodResult(name, METHOD_LABELS[name], quality, cost, time.perf_counter() - started)


def progress_totals(settings: EvaluationSettings, methods: Sequence[str]) -> dict[str, int]:
    """Units of work per method for progress bars (splits, or splits x trials for searches)."""
    return {name: settings.splits * (settings.trials if name in SEARCHED_METHODS else 1) for name in methods}
