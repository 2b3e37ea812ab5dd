"""The committed word-problem runs: what docs/streaming.md says of them holds."""

from __future__ import annotations

import gzip
import json
import statistics
from collections import defaultdict
from pathlib import Path

from graders import grade

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "data" / "local" / "word-problems-runs.jsonl.gz"
QUESTIONS = ROOT / "collection" / "data" / "word-problems.jsonl"
MEMBERS = ("qwen0.5b-steps", "qwen1.5b-steps")


def _rows() -> list[dict]:
    with gzip.open(RUNS, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def test_every_question_has_both_members_and_is_a_question_of_the_set() -> None:
    asked = {json.loads(line)["query_id"]: json.loads(line) for line in QUESTIONS.read_text().splitlines()}
    members = defaultdict(set)
    for row in _rows():
        assert row["query_id"] in asked and row["answer"] == asked[row["query_id"]]["answer"]
        members[row["query_id"]].add(row["model"])
    assert all(found == set(MEMBERS) for found in members.values())
    assert len(members) >= 40


def test_each_answer_is_graded_as_the_grader_grades_its_text_and_carries_its_logprobs() -> None:
    for row in _rows():
        assert row["correct"] == grade("final_numeric", row["response"], row["answer"])
        assert len(row["logprobs"]) >= min(row["completion_tokens"], 1)
        assert row["request_bytes"] > 0


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


def test_the_word_problem_policy_loads_and_serves_the_two_members() -> None:
    from policies.store import load_policy

    policy = load_policy(ROOT / "policies" / "local-steps.json")
    assert set(policy.models) == set(MEMBERS)
    # docs/streaming.md: no tier keeps enough of a (negative) whole-answer gain to commit on a prefix.
    assert all(tier.commit is None for tier in policy.tiers.values())
