"""The label-free study: how much true quality a policy calibrated on judge labels gives up.

On a collected runs table whose ``correct`` is the ground truth and whose ``response`` holds each
model's answer, every split of the queries into a calibration and a held-out half is used twice on
the SAME calibration half:

* policy A is calibrated on the true labels;
* policy B is calibrated on judge labels: each answer's agreement with the reference model's answer
  to the same query (``traffic.relabel``, as ``cascade traffic label`` stores them). A query with a
  missing judge label is left out of B's calibration, as the traffic export leaves it out;

and both are scored on the held-out half with the TRUE labels. Per tier the study reports the mean
over splits (and the 5th-95th percentile band) of each policy's held-out true quality and cost, and
the quality loss A - B (paired per split). Calibration is ``calibration.policy.calibrate``, exact and
vectorized; the only loops are over splits and judges.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from calibration.policy.calibrate import calibrate
from calibration.recalibration.outcomes import policy_outcomes
from calibration.runs import RunsMatrix
from calibration.splits import stratified_splits
from calibration.tiers import TiersSpec, UnreachableTierError
from traffic.judges.base import Judge, Verdict

BAND = (5.0, 95.0)


class StudyError(Exception):
    """The study cannot run on this input (one-line message)."""


@dataclass(frozen=True)
class JudgeLabels:
    """One judge's labels of the runs' answers, aligned with the matrix.

    ``quality``: ``(n, k)`` judge labels (NaN where missing); ``agreement``: per model, the share of
    its labelled answers whose judge label equals the true label (0/1 labels rounded at 0.5);
    ``reference``: the model whose answer defines right; ``judge_cost_usd``: what judging all the
    answers cost (the ``llm`` judge's calls; 0 for the others).
    """

    judge: str
    reference: str
    quality: np.ndarray
    agreement: dict[str, float]
    judge_cost_usd: float = 0.0

    @property
    def complete(self) -> np.ndarray:
        """``(n,)`` bool: queries with a judge label for every model."""
        return np.isfinite(self.quality).all(axis=1)


def judge_labels(
    runs: Path,
    matrix: RunsMatrix,
    judge_config: dict[str, Any],
    reference: str,
    *,
    questions: dict[str, str] | None = None,
    concurrency: int = 1,
    on_query: Callable[[int, int], None] | None = None,
) -> JudgeLabels:
    """Label the runs' responses with a judge (``traffic.relabel``) against ``reference``.

    ``questions`` (query_id -> text) fill in a table without prompts; ``concurrency`` and
    ``on_query(done, total)`` are ``relabel``'s.
    """
    from traffic.judges import make_judge, parse_judge_config
    from traffic.relabel import read_queries, relabel

    if reference not in matrix.models:
        raise StudyError(f"reference {reference!r} is not a model of {runs} ({', '.join(matrix.models)})")
    queries = read_queries(runs)
    if not any(isinstance(r.get("response"), str) for answers in queries.values() for r in answers.values()):
        raise StudyError(f"{runs} has no 'response' column: collect it with cascade collect")
    judge = _CostCounting(make_judge(parse_judge_config(judge_config)))

    async def label_all() -> list[Any]:
        try:
            labelled = await relabel(
                queries,
                judge,
                reference,
                questions=questions,
                concurrency=concurrency,
                on_query=on_query,
            )
            return list(labelled)
        finally:
            closer = getattr(judge.inner, "aclose", None)
            if closer is not None:
                await closer()

    rows = asyncio.run(label_all())
    query_index = {str(q): i for i, q in enumerate(matrix.query_ids)}
    model_index = {m: j for j, m in enumerate(matrix.models)}
    labels = np.full(matrix.quality.shape, np.nan)
    for row in rows:  # ingestion: one assignment per (query, model) answer
        i, j = query_index.get(row.query_id), model_index.get(row.model)
        if i is not None and j is not None and row.correct is not None:
            labels[i, j] = row.correct
    labelled = np.isfinite(labels)
    same = (np.round(labels) == np.round(matrix.quality)) & labelled
    agreement = {
        model: float(same[:, j].sum() / max(1, labelled[:, j].sum())) for j, model in enumerate(matrix.models)
    }
    return JudgeLabels(str(judge_config["kind"]), reference, labels, agreement, judge.spent_usd)


class _CostCounting:
    """A judge, with the cost of its verdicts added up."""

    def __init__(self, inner: Judge):
        self.inner = inner
        self.name = inner.name
        self.spent_usd = 0.0

    async def judge(self, question: str, reference: str, answer: str) -> Verdict:
        verdict = await self.inner.judge(question, reference, answer)
        self.spent_usd += verdict.cost_usd
        return verdict


@dataclass(frozen=True)
class TierStudy:
    """Per split (``(S,)`` arrays, NaN where a calibration failed) for one tier and one judge."""

    true_quality: np.ndarray
    true_cost: np.ndarray
    judge_quality: np.ndarray
    judge_cost: np.ndarray

    @property
    def loss(self) -> np.ndarray:
        """True quality of the truth-calibrated tier minus the judge-calibrated one, per split."""
        return self.true_quality - self.judge_quality


@dataclass(frozen=True)
class JudgeStudy:
    """One judge's result: its labels and every tier's per-split outcomes."""

    labels: JudgeLabels
    tiers: dict[str, TierStudy]
    calibration_queries_dropped: float  # mean per split: queries without every judge label


def run_study(
    matrix: RunsMatrix,
    labels: Sequence[JudgeLabels],
    spec: TiersSpec,
    *,
    splits: int = 50,
    holdout: float = 0.5,
    seed: int = 0,
    randomize: bool = False,
) -> list[JudgeStudy]:
    """Calibrate A (true labels) and B (each judge's labels) per split; score both on held-out truth."""
    draws = stratified_splits(
        matrix.n_queries, n_splits=splits, test_fraction=holdout, seed=seed, strata=matrix.strata
    )
    tiers = list(spec.tiers)
    shape = (len(draws), len(tiers))
    truth_quality, truth_cost = np.full(shape, np.nan), np.full(shape, np.nan)
    judged = [(np.full(shape, np.nan), np.full(shape, np.nan)) for _ in labels]
    dropped = np.zeros((len(labels), len(draws)))
    judge_matrices = [replace(matrix, quality=np.nan_to_num(lab.quality, nan=0.0)) for lab in labels]
    for s, split in enumerate(draws):  # a loop over splits; each calibration is exact and vectorized
        _score(
            matrix, matrix, spec, split.calibration, split.test, randomize, truth_quality[s], truth_cost[s]
        )
        for j, (lab, judge_matrix) in enumerate(zip(labels, judge_matrices, strict=True)):
            rows = split.calibration[lab.complete[split.calibration]]
            dropped[j, s] = split.calibration.size - rows.size
            quality, cost = judged[j]
            _score(judge_matrix, matrix, spec, rows, split.test, randomize, quality[s], cost[s])
    return [
        JudgeStudy(
            lab,
            {
                name: TierStudy(truth_quality[:, t], truth_cost[:, t], judged[j][0][:, t], judged[j][1][:, t])
                for t, name in enumerate(tiers)
            },
            float(dropped[j].mean()),
        )
        for j, lab in enumerate(labels)
    ]


def _score(
    calibration_matrix: RunsMatrix,
    truth: RunsMatrix,
    spec: TiersSpec,
    calibration_rows: np.ndarray,
    test_rows: np.ndarray,
    randomize: bool,
    quality_out: np.ndarray,
    cost_out: np.ndarray,
) -> None:
    """Calibrate on ``calibration_matrix`` rows, write each tier's held-out TRUE quality and cost."""
    if calibration_rows.size == 0:
        return
    try:
        policy = calibrate(calibration_matrix, spec, rows=calibration_rows, randomize=randomize).policy
    except UnreachableTierError:  # a min_quality these labels never reach: this split stays NaN
        return
    outcomes = policy_outcomes(policy, truth, test_rows)
    for t, name in enumerate(spec.tiers):
        quality_out[t] = outcomes[name].quality.mean()
        cost_out[t] = outcomes[name].cost.mean()


def summarize(value: np.ndarray) -> dict[str, float | None]:
    """Mean over splits and the 5th-95th percentile band (NaN splits ignored; None if all are NaN)."""
    finite = value[np.isfinite(value)]
    if finite.size == 0:
        return {"mean": None, "p5": None, "p95": None}
    low, high = np.percentile(finite, BAND)
    return {"mean": float(finite.mean()), "p5": float(low), "p95": float(high)}


def study_document(
    studies: Sequence[JudgeStudy],
    spec: TiersSpec,
    matrix: RunsMatrix,
    settings: dict[str, Any],
    target: float,
) -> dict[str, Any]:
    """The JSON summary: settings, true model qualities, per judge its label agreement and tiers."""
    judges = []
    for study in studies:
        tiers = {}
        for name, tier in study.tiers.items():
            loss = summarize(tier.loss)
            tiers[name] = {
                "objective": spec.tiers[name].as_dict(),
                "true_labels": {
                    "quality": summarize(tier.true_quality),
                    "cost_usd": summarize(tier.true_cost),
                },
                "judge_labels": {
                    "quality": summarize(tier.judge_quality),
                    "cost_usd": summarize(tier.judge_cost),
                },
                "quality_loss": loss,
                "splits_losing_more_than_target": float(np.mean(tier.loss[np.isfinite(tier.loss)] > target))
                if np.isfinite(tier.loss).any()
                else None,
                "failed_splits": int(np.sum(~np.isfinite(tier.loss))),
                "within_target": None if loss["mean"] is None else bool(loss["mean"] <= target),
            }
        judges.append(
            {
                "judge": study.labels.judge,
                "reference": study.labels.reference,
                "label_agreement_with_truth": study.labels.agreement,
                "judge_cost_usd": study.labels.judge_cost_usd,
                "queries_without_every_label": int((~study.labels.complete).sum()),
                "calibration_queries_dropped_per_split": study.calibration_queries_dropped,
                "tiers": tiers,
            }
        )
    return {
        "study": "label-free calibration",
        "settings": settings,
        "target_max_loss": target,
        "queries": matrix.n_queries,
        "models": {
            m: {
                "true_quality": float(matrix.quality[:, j].mean()),
                "mean_cost_usd": float(matrix.cost[:, j].mean()),
            }
            for j, m in enumerate(matrix.models)
        },
        "judges": judges,
    }
