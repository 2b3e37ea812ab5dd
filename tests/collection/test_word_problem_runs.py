"""The committed word-problem runs (generated problems, and GSM8K train questions answered by the same
members): what docs/streaming.md and docs/calibrate.md#real-word-problems say of them holds."""

from __future__ import annotations

import gzip
import json
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from graders import grade

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "data" / "local" / "word-problems-runs.jsonl.gz"
QUESTIONS = ROOT / "collection" / "data" / "word-problems.jsonl"
# The same members on real problems: GSM8K's train split (collection/gsm8k.py).
SETS = {
    "generated": (RUNS, QUESTIONS),
    "gsm8k": (
        ROOT / "data" / "local" / "gsm8k-train-runs.jsonl.gz",
        ROOT / "collection" / "data" / "gsm8k-train.jsonl",
    ),
}
MEMBERS = ("qwen0.5b-steps", "qwen1.5b-steps")


def _rows(path: Path = RUNS) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


@pytest.mark.parametrize("questions", list(SETS))
def test_every_question_has_both_members_and_is_a_question_of_the_set(questions: str) -> None:
    runs, asked_path = SETS[questions]
    asked = {json.loads(line)["query_id"]: json.loads(line) for line in asked_path.read_text().splitlines()}
    members = defaultdict(set)
    for row in _rows(runs):
        assert row["query_id"] in asked and row["answer"] == asked[row["query_id"]]["answer"]
        members[row["query_id"]].add(row["model"])
    assert all(found == set(MEMBERS) for found in members.values())
    assert len(members) >= 40


@pytest.mark.parametrize("questions", list(SETS))
def test_each_answer_is_graded_as_the_grader_grades_its_text_and_carries_its_logprobs(questions: str) -> None:
    for row in _rows(SETS[questions][0]):
        assert row["correct"] == grade("final_numeric", row["response"], row["answer"])
        assert len(row["logprobs"]) >= min(row["completion_tokens"], 1)
        assert row["request_bytes"] > 0
        # The cap each member sent (localpool/models.yaml): a cancelled stage is charged within it.
        assert row["completion_cap"] == 320 and row["completion_tokens"] <= 320


def test_the_cheap_member_writes_long_answers_and_the_strong_one_is_right_more_often() -> None:
    rows = _rows()
    by_model = {m: [r for r in rows if r["model"] == m] for m in MEMBERS}
    assert statistics.median(r["completion_tokens"] for r in by_model["qwen0.5b-steps"]) >= 80
    accuracy = {m: statistics.mean(r["correct"] for r in found) for m, found in by_model.items()}
    assert accuracy["qwen1.5b-steps"] > accuracy["qwen0.5b-steps"]


def test_the_pool_price_sheet_prices_each_member_at_its_server_with_its_declared_overrun() -> None:
    from localpool.manifest import load_manifest
    from money.price_sheet import load_cancel_overruns, load_price_sheet

    manifest = load_manifest()
    path = ROOT / "data" / "local" / "pool-prices.yaml"
    overruns = load_cancel_overruns(path)
    for name, price in load_price_sheet(path).items():
        server = manifest.models[manifest.members[name].server]
        assert price == server.price, name
        assert overruns.get(name) == server.cancel_overrun_tokens, name


@pytest.mark.parametrize(
    ("policy_file", "study_file"),
    [
        ("local-steps.json", "word-problems-commit.json"),  # the pool's prices
        ("local-steps-hosted.json", "word-problems-hosted-commit.json"),  # a hosted pair's prices
    ],
)
def test_a_word_problem_policy_commits_on_a_prefix_exactly_where_its_study_chose_it(
    policy_file: str, study_file: str
) -> None:
    from calibration.policy.commit_choice import keeps_gain
    from policies.store import load_policy

    policy = load_policy(ROOT / "policies" / policy_file)
    study = json.loads((ROOT / "data" / "local" / study_file).read_text())
    assert set(policy.models) == set(MEMBERS)
    assert any(tier.commit is not None for tier in policy.tiers.values()), "no tier commits on a prefix"
    for name, tier in policy.tiers.items():
        chosen = study["chosen"][name]
        results = study["tiers"][name]
        if tier.commit is None:
            assert chosen["rule"] == "buffer", name
            continue
        # The rule the study chose, and it kept the buffered rule's held-out gain (docs/streaming.md).
        assert tier.commit.document() == chosen, name
        result = next(r for r in results.values() if r["commit"] == chosen)
        assert keeps_gain(result["gain"], results["buffer"]["gain"], study["min_gain_share"]), name
