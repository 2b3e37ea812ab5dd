"""The label-free study on generated arithmetic answered by fast and step-by-step pool members."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from calibration.recalibration.label_free import StudyError, judge_labels, run_study, study_document
from calibration.runs import load_runs
from calibration.tiers import parse_tiers
from tests.support.scripted_upstream import Reply, ScriptedUpstream

REPO = Path(__file__).resolve().parents[2]
# (name, cost per call, accuracy): a fast member answers with the number, the others reason first.
MEMBERS = (("fast-small", 1e-6, 0.45), ("think-small", 6e-6, 0.7), ("think-large", 2e-5, 0.9))
SPEC = {
    "default_tier": "balanced",
    "tiers": {"economy": {"max_cost_usd": 5e-6}, "balanced": {"max_cost_usd": 1.2e-5}},
}


def _logprobs(confidence: float) -> list[dict[str, Any]]:
    rest = (1 - confidence) / 2
    top = [
        {"token": "1", "logprob": math.log(confidence)},
        *({"token": t, "logprob": math.log(rest)} for t in "23"),
    ]
    return [{"token": "1", "logprob": math.log(confidence), "top_logprobs": top}]


def _response(member: str, a: int, b: int, value: int) -> str:
    if member.startswith("fast"):
        return str(value)
    # Intermediate numbers first, the conclusion on an "Answer:" line, then a remark with a number.
    return f"{a} * {b} = {a * b}\nThen add the rest.\nAnswer: {value}\n(2 steps)"


def arithmetic_runs(path: Path, n: int = 240, *, seed: int = 0, perfect_reference: bool = False) -> Path:
    """A ``cascade collect``-style JSONL runs table: ground truth in ``correct``, answers in ``response``."""
    rng = random.Random(seed)
    with path.open("w") as handle:
        for q in range(n):
            a, b, c = rng.randint(12, 99), rng.randint(3, 9), rng.randint(10, 99)
            answer = a * b + c
            for member, cost, accuracy in MEMBERS:
                right = rng.random() < accuracy or (perfect_reference and member == "think-large")
                value = answer if right else answer + rng.choice((-10, -1, 1, 2, 10))
                confidence = rng.uniform(0.6, 0.99) if right else rng.uniform(0.3, 0.8)
                record = {
                    "query_id": f"arith-{q:04d}",
                    "model": member,
                    "correct": 1.0 if right else 0.0,
                    "cost_usd": cost,
                    "prompt_tokens": 30,
                    "completion_tokens": 4 if member.startswith("fast") else 60,
                    "response": _response(member, a, b, value),
                    "answer": str(answer),
                    "logprobs": _logprobs(round(confidence, 4)),
                    "dataset": "arithmetic",
                }
                handle.write(json.dumps(record) + "\n")
    return path


def test_numeric_labels_are_agreement_with_the_reference_final_answer(tmp_path: Path) -> None:
    runs = arithmetic_runs(tmp_path / "runs.jsonl")
    matrix = load_runs(runs)
    labels = judge_labels(runs, matrix, {"kind": "numeric"}, "think-large")
    records = [json.loads(line) for line in runs.read_text().splitlines()]
    final = {
        (r["query_id"], r["model"]): int(r["response"].split("Answer: ")[-1].split()[0]) for r in records
    }
    final.update(
        {(r["query_id"], r["model"]): int(r["response"]) for r in records if r["model"] == "fast-small"}
    )
    for i, query in enumerate(matrix.query_ids):
        for j, model in enumerate(matrix.models):
            assert labels.quality[i, j] == float(final[(query, model)] == final[(query, "think-large")])
    assert labels.complete.all()
    # The reference is right on 90% of the queries, so the judge agrees with the truth on them only.
    reference = matrix.models.index("think-large")
    assert labels.agreement["think-large"] == pytest.approx(matrix.quality[:, reference].mean())


def test_with_a_reference_that_is_always_right_judge_labels_lose_nothing(tmp_path: Path) -> None:
    runs = arithmetic_runs(tmp_path / "runs.jsonl", perfect_reference=True)
    matrix = load_runs(runs)
    labels = judge_labels(runs, matrix, {"kind": "numeric"}, "think-large")
    assert np.array_equal(labels.quality, matrix.quality)  # agreement with a perfect reference IS the truth
    (study,) = run_study(matrix, [labels], parse_tiers(SPEC), splits=8, seed=1)
    for tier in study.tiers.values():
        assert np.array_equal(tier.loss, np.zeros(8))
        assert np.array_equal(tier.true_cost, tier.judge_cost)


def test_an_imperfect_reference_is_scored_against_the_truth(tmp_path: Path) -> None:
    runs = arithmetic_runs(tmp_path / "runs.jsonl")
    matrix = load_runs(runs)
    spec = parse_tiers(SPEC)
    labels = judge_labels(runs, matrix, {"kind": "numeric"}, "think-large")
    studies = run_study(matrix, [labels], spec, splits=10, seed=0)
    document = study_document(studies, spec, matrix, {"splits": 10}, target=0.03)
    (judge,) = document["judges"]
    assert judge["judge"] == "numeric" and judge["queries_without_every_label"] == 0
    for name, tier in judge["tiers"].items():
        study = studies[0].tiers[name]
        assert tier["quality_loss"]["mean"] == pytest.approx(
            np.mean(study.true_quality - study.judge_quality)
        )
        assert tier["quality_loss"]["p5"] <= tier["quality_loss"]["mean"] <= tier["quality_loss"]["p95"]
        assert tier["within_target"] == (tier["quality_loss"]["mean"] <= 0.03)
        assert tier["splits_losing_more_than_target"] == np.mean(
            study.true_quality - study.judge_quality > 0.03
        )
        assert tier["failed_splits"] == 0
        # held-out TRUE quality: never above the best single model's true quality by much
        assert tier["judge_labels"]["quality"]["mean"] <= matrix.quality.mean(axis=0).max() + 0.05


def test_runs_without_responses_are_refused(tmp_path: Path) -> None:
    runs = arithmetic_runs(tmp_path / "runs.jsonl")
    stripped = tmp_path / "no-response.jsonl"
    lines = [json.loads(line) for line in runs.read_text().splitlines()]
    stripped.write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "response"}) + "\n" for r in lines)
    )
    with pytest.raises(StudyError, match="no 'response' column"):
        judge_labels(stripped, load_runs(stripped), {"kind": "numeric"}, "think-large")


def test_the_bench_script_writes_its_summary(tmp_path: Path) -> None:
    runs = arithmetic_runs(tmp_path / "runs.jsonl", n=120)
    tiers = tmp_path / "tiers.yaml"
    tiers.write_text(json.dumps(SPEC))  # JSON is YAML
    summary = tmp_path / "summary.json"
    script = [sys.executable, str(REPO / "bench/learning/label_free.py"), str(runs), "--tiers", str(tiers)]
    result = subprocess.run(
        [*script, "--judge", "numeric", "--judge", "exact", "--splits", "3", "--json", str(summary)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(summary.read_text())
    assert [j["judge"] for j in document["judges"]] == ["numeric", "exact"]
    assert document["settings"]["reference"] == "think-large" and document["settings"]["splits"] == 3
    assert "judge numeric" in result.stdout and "loss A - B" in result.stdout


def _judge_answer(p_yes: float) -> Reply:
    """An OpenAI-compatible judge answer: "yes" with P(yes) ``p_yes`` in its top logprobs, usage (100, 1)."""
    top = [{"token": "yes", "logprob": math.log(p_yes)}, {"token": "no", "logprob": math.log(1 - p_yes)}]
    return Reply(
        body={
            "choices": [
                {"message": {"content": "yes"}, "logprobs": {"content": [{**top[0], "top_logprobs": top}]}}
            ],
            "usage": {"prompt_tokens": 100, "completion_tokens": 1},
        }
    )


def test_llm_judge_labels_read_questions_from_a_file_and_add_up_their_cost(
    tmp_path: Path, upstream: ScriptedUpstream
) -> None:
    runs = arithmetic_runs(tmp_path / "runs.jsonl", n=12)
    matrix = load_runs(runs)
    upstream.set_default("judge", _judge_answer(0.8))  # every pair judged P(yes) 0.8
    questions = {f"arith-{q:04d}": f"Question {q}?" for q in range(12)}
    config = {
        "kind": "llm",
        "base_url": upstream.base_url,
        "model": "judge",
        "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
    }
    labels = judge_labels(runs, matrix, config, "think-large", questions=questions, concurrency=4)
    reference = matrix.models.index("think-large")
    others = [j for j in range(len(matrix.models)) if j != reference]
    assert np.all(labels.quality[:, reference] == 1.0)  # no call for the reference's own answer
    assert np.allclose(labels.quality[:, others], 0.8)
    calls = 12 * len(others)
    asked = [call.body["messages"][1]["content"].split("\n")[1] for call in upstream.calls("judge")]
    assert sorted(asked) == sorted(q for q in questions.values() for _ in others)
    assert labels.judge_cost_usd == pytest.approx(calls * (100 * 1.0 + 1 * 2.0) / 1e6)
