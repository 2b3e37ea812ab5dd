"""Does a scorer fitted on "escalation helps" beat the confidence scorers, held out? (the
``escalation_benefit`` scorer, ``policies.benefit``; docs/calibrate.md#the-benefit-scorer)

    PYTHONPATH=. .venv/bin/python bench/calibration/benefit_scorer.py \
        [--runs data/local/arithmetic-runs.jsonl.gz ...] [--splits 50] [--out FILE.md]

For every pair (scored model, the costlier model it escalates to) of each runs file:

* **AUROC** for "escalation helps" (the costlier model graded above the scored one) of a low
  score, over the queries whose scored answer has a score (a structurally invalid or truncated
  answer is escalated whatever its score): the benefit scorer cross-fitted over 5 folds (each
  query scored by a model fitted without it) against every logprob scorer of ``policies.scorers``;
  the difference to the best of those comes with a 95% paired-bootstrap interval (2,000 resamples,
  seed 0). The best is picked on the same queries, which flatters it, not the benefit scorer.
* **Tiers**: three budgets per pair, escalating about a quarter, half and three quarters of the
  queries' worth (the cheap model's mean cost plus that share of the costlier one's), each solved
  as ``cascade calibrate`` solves a tier, on 50 stratified halves (``calibration.splits``, seed 0):
  the threshold chosen on one half, the route measured on the other. The benefit scorer is fitted
  on the choosing half only (its scores there cross-fitted, so the threshold is not chosen on
  in-sample scores) and scores the other half with the model fitted on the whole choosing half.
  Compared with the default scorer (``mean_token_negentropy``) on the same halves: held-out
  quality and cost, their paired differences with the 2.5-97.5 percentiles over the halves.

Prints Markdown (and writes it to ``--out``).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np

from calibration.benefit_fit import BenefitFitError, answer_feature_tables, crossfit_scores, escalation_helps
from calibration.diagnostics import auroc
from calibration.envelope import compute_envelope
from calibration.heldout_expected import route_outcome, solve_or_best
from calibration.policy.benefit_choice import BenefitSettings, benefit_scores, pair_matrix
from calibration.runs import RunsMatrix, load_runs
from calibration.splits import stratified_splits
from calibration.tiers import TierObjective
from policies.scorers import SCORERS

RUNS = (
    Path("data/local/arithmetic-runs.jsonl.gz"),
    Path("data/local/word-problems-runs.jsonl.gz"),
    Path("data/local/bfcl-runs.jsonl.gz"),
)
TOP_K = 15
SHARES = (0.25, 0.5, 0.75)
DEFAULT = "mean_token_negentropy"
SETTINGS = BenefitSettings(top_k=TOP_K)


def bootstrap_difference(
    helps: np.ndarray, first: np.ndarray, second: np.ndarray, resamples: int = 2000
) -> tuple[float, float]:
    """95% paired-bootstrap interval of AUROC(first) - AUROC(second) for ``helps`` (low = helps)."""
    rng = np.random.default_rng(0)
    n = helps.shape[0]
    values = []
    for _ in range(resamples):
        pick = rng.integers(0, n, n)
        if helps[pick].all() or not helps[pick].any():
            continue
        values.append(auroc(-first[pick], helps[pick]) - auroc(-second[pick], helps[pick]))
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def auroc_rows(path: Path, matrix: RunsMatrix, scored: int, escalated_to: int) -> list[str]:
    """The AUROC table's row for one pair."""
    model = matrix.models[scored]
    features = answer_feature_tables(path, matrix.query_ids, [model], TOP_K)[model]
    usable = np.isfinite(matrix.score[:, scored]) & np.isfinite(features).all(axis=1)
    helps = escalation_helps(matrix.quality, scored, escalated_to)[usable]
    benefit = crossfit_scores(features[usable], helps)
    existing = {name: _scores(path, matrix, scored, name)[usable] for name in SCORERS}
    areas = {name: auroc(-values, helps) for name, values in existing.items()}
    best = max(areas, key=lambda name: areas[name])
    mine = auroc(-benefit, helps)
    low, high = bootstrap_difference(helps, benefit, existing[best])
    return [
        f"| {matrix.models[scored]} → {matrix.models[escalated_to]} | {usable.sum()} | {helps.sum()} "
        f"| **{mine:.3f}** | {areas[DEFAULT]:.3f} | {best} {areas[best]:.3f} "
        f"| {mine - areas[best]:+.3f} [{low:+.3f}, {high:+.3f}] |"
    ]


_SCORE_CACHE: dict[tuple[str, str], RunsMatrix] = {}


def _scores(path: Path, matrix: RunsMatrix, scored: int, scorer: str) -> np.ndarray:
    """The scored model's scores under ``scorer``, aligned with ``matrix``'s queries."""
    key = (str(path), scorer)
    if key not in _SCORE_CACHE:
        _SCORE_CACHE[key] = load_runs(path, scorer=scorer, top_k=TOP_K)
    other = _SCORE_CACHE[key]
    position = {str(q): i for i, q in enumerate(other.query_ids)}
    rows = [position.get(str(q), -1) for q in matrix.query_ids]
    column = other.model_index(matrix.models[scored])
    values = np.array([other.score[r, column] if r >= 0 else np.nan for r in rows])
    return np.where(np.isfinite(values), values, -np.inf)


def tier_rows(path: Path, matrix: RunsMatrix, scored: int, escalated_to: int, splits: int) -> list[str]:
    """The tiers table's rows for one pair (one per budget share)."""
    cheap = matrix.models[scored]
    features = answer_feature_tables(path, matrix.query_ids, [cheap], TOP_K)
    pair = pair_matrix(replace(matrix, answer_features=features), cheap, matrix.models[escalated_to])
    mean_cost = pair.cost.mean(axis=0)
    budgets = [float(mean_cost[0] + share * mean_cost[1]) for share in SHARES]
    halves = stratified_splits(pair.n_queries, n_splits=splits, test_fraction=0.5, seed=0, strata=pair.strata)
    outcomes = np.full((2, len(budgets), len(halves), 3), np.nan)  # scorer, budget, split, measure
    for index, half in enumerate(halves):
        try:
            benefit: np.ndarray | None = benefit_scores(pair, half.calibration, half.test, SETTINGS)[0]
        except BenefitFitError:
            benefit = None
        for which, score in enumerate((pair.score, benefit)):
            if score is None:
                continue
            scored_pair = replace(pair, score=score)
            envelope = compute_envelope(scored_pair, rows=half.calibration)
            for b, budget in enumerate(budgets):
                solution = solve_or_best(envelope, TierObjective(max_cost_usd=budget), False, "tier")
                outcomes[which, b, index] = route_outcome(scored_pair, solution, half.test)
    rows = []
    for b, share in enumerate(SHARES):
        base, mine = outcomes[0, b], outcomes[1, b]
        kept = np.isfinite(mine).all(axis=1)
        gain = mine[kept, 1] - base[kept, 1]
        low, high = np.percentile(gain, [2.5, 97.5])
        rows.append(
            f"| {pair.models[0]} → {pair.models[1]} | {share:.2f} | {budgets[b]:.3g} "
            f"| {np.nanmean(base[:, 1]):.3f} | {np.nanmean(mine[kept, 1]):.3f} "
            f"| {gain.mean():+.3f} [{low:+.3f}, {high:+.3f}] "
            f"| {np.nanmean(base[:, 0]):.3g} / {np.nanmean(mine[kept, 0]):.3g} "
            f"| {np.nanmean(base[:, 2]):.2f} / {np.nanmean(mine[kept, 2]):.2f} | {kept.sum()} |"
        )
    return rows


def main() -> None:
    """Both tables for every pair of every runs file (Markdown)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=Path, nargs="+", default=list(RUNS))
    parser.add_argument("--splits", type=int, default=50)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines: list[str] = []
    for path in args.runs:
        start = len(lines)
        matrix = load_runs(path, scorer=DEFAULT, top_k=TOP_K)
        pairs = [(i, j) for i in range(len(matrix.models)) for j in range(i + 1, len(matrix.models))]
        lines += [
            f"\n### {path.name}: {matrix.n_queries} queries\n",
            "| pair | scored | helps | benefit AUROC | mean_token_negentropy | best existing "
            "| benefit - best [95%] |",
            "|---|---:|---:|---:|---:|---|---|",
        ]
        for i, j in pairs:
            lines += auroc_rows(path, matrix, i, j)
        lines += [
            "",
            f"Held out, {args.splits} halves: quality default → benefit, gain [2.5-97.5 pct], "
            "cost USD/query and escalation rate default / benefit.\n",
            "| pair | share | budget USD | quality default | quality benefit | gain | cost | escalation "
            "| halves |",
            "|---|---:|---:|---:|---:|---|---|---|---:|",
        ]
        for i, j in pairs:
            lines += tier_rows(path, matrix, i, j, args.splits)
        print("\n".join(lines[start:]), flush=True)
    if args.out is not None:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
