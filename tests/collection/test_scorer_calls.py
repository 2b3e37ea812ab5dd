"""Collection of the black-box scorers' extra calls (scorer_calls) against httpx.MockTransport."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from collection.collector import CollectOptions, collect
from collection.prompts import Prompt
from collection.runs_writer import RunsWriter
from collection.scorer_calls import ScorerCallsOptions, recorded_rows
from collection.targets import Target
from money import Price
from policies.blackbox import (
    SELF_REPORT_PROMPT,
    VERIFIER_PROMPT,
    consistency_score,
    self_report_score,
    verifier_score_from_position,
)
from policies.request_defaults import RequestDefaults
from policies.scorers import CallSettings
from traffic.judges.equivalence import equivalence

PROMPTS = [
    Prompt(query_id=f"q{i}", prompt=f"What is {i} + {i}?", answer=str(2 * i), grader="numeric")
    for i in range(3)
]
STAGE = Target(
    name="fast",
    base_url="http://fast.test/v1",
    model="up-fast",
    price=Price(input_per_mtok=1.0, output_per_mtok=2.0),
    request_defaults=RequestDefaults(system="Reply with a number.", max_tokens=8),
)
VERIFIER = Target(
    name="judge",
    base_url="http://judge.test/v1",
    model="up-judge",
    price=Price(input_per_mtok=0.5, output_per_mtok=0.5),
)


def reply(
    text: str, *, prompt_tokens: int, completion_tokens: int, first: dict[str, Any] | None = None
) -> dict:
    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text}}
    if first is not None:
        choice["logprobs"] = {"content": [first, {"token": ".", "logprob": -0.1, "top_logprobs": []}]}
    return {
        "choices": [choice],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
    }


class Upstream:
    """The stage answers "2*i" at temperature 0 and alternates right/wrong samples when sampled; it
    states 80 when asked its confidence. The verifier says yes with P 0.75. Records every body."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.samples = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        if body["model"] == "up-judge":
            first = {
                "token": "yes",
                "logprob": math.log(0.6),
                "top_logprobs": [
                    {"token": "yes", "logprob": math.log(0.6)},
                    {"token": "No", "logprob": math.log(0.2)},
                    {"token": " Yes", "logprob": math.log(0.15)},
                ],
            }
            return httpx.Response(200, json=reply("yes", prompt_tokens=60, completion_tokens=1, first=first))
        question = next(m["content"] for m in body["messages"] if m["role"] == "user")
        i = int(question.split()[2])
        if body["messages"][-1]["content"] == SELF_REPORT_PROMPT:
            return httpx.Response(200, json=reply("80", prompt_tokens=50, completion_tokens=2))
        if body.get("temperature", 0) > 0:
            self.samples += 1
            text = str(2 * i) if self.samples % 2 else str(2 * i + 1)
            return httpx.Response(200, json=reply(text, prompt_tokens=30, completion_tokens=2))
        first = {
            "token": str(2 * i),
            "logprob": -0.1,
            "top_logprobs": [{"token": str(2 * i), "logprob": -0.1}],
        }
        return httpx.Response(200, json=reply(str(2 * i), prompt_tokens=30, completion_tokens=2, first=first))


async def run(path: Path, upstream: Upstream, options: CollectOptions) -> None:
    with RunsWriter(path) as writer:
        summary = await collect(
            PROMPTS, [STAGE], writer, set(), options, transport=httpx.MockTransport(upstream)
        )
    assert summary.failed == 0, summary.errors


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


VERIFIER_CALL = CallSettings(top_k=10, model="judge", prompt=VERIFIER_PROMPT)
CALLS = ScorerCallsOptions(
    scorers={
        "verifier": VERIFIER_CALL,
        "consistency": CallSettings(samples=4, temperature=0.7),
        "self_report": CallSettings(prompt=SELF_REPORT_PROMPT),
    },
    targets={"judge": VERIFIER},
)


async def test_each_answer_records_what_every_scorer_needs_with_the_calls_cost(tmp_path: Path) -> None:
    upstream = Upstream()
    await run(tmp_path / "runs.jsonl", upstream, CollectOptions(concurrency=1, scorer_calls=CALLS))
    (row, *_) = rows(tmp_path / "runs.jsonl")
    calls = row["scorer_calls"]
    verifier = calls["verifier"]
    assert verifier["model"] == "judge" and verifier["prompt"] == VERIFIER_PROMPT
    assert verifier_score_from_position(verifier["first_token"]) == pytest.approx(0.75 / 0.95)
    assert verifier["cost_usd"] == pytest.approx((60 * 0.5 + 1 * 0.5) / 1e6)
    consistency = calls["consistency"]
    assert consistency["samples"] == ["0", "1", "0", "1"] and consistency["temperature"] == 0.7
    assert consistency["cost_usd"] == pytest.approx(4 * (30 * 1.0 + 2 * 2.0) / 1e6)
    assert len(consistency["latency_ms"]) == 4
    assert consistency_score(row["response"], consistency["samples"], equivalence("numeric")) == 0.5
    report = calls["self_report"]
    assert self_report_score(report["text"]) == 0.8
    assert report["cost_usd"] == pytest.approx((50 * 1.0 + 2 * 2.0) / 1e6)
    # 3 questions x (answer + verifier + 4 samples + self-report): every call made is recorded.
    assert len(upstream.requests) == 3 * 7


async def test_the_extra_calls_are_built_by_the_policies_functions_from_the_stage_request(
    tmp_path: Path,
) -> None:
    upstream = Upstream()
    await run(tmp_path / "runs.jsonl", upstream, CollectOptions(concurrency=1, scorer_calls=CALLS))
    stage = upstream.requests[0]
    judge = next(b for b in upstream.requests if b["model"] == "up-judge")
    sample = next(b for b in upstream.requests if b.get("temperature") == 0.7)
    follow_up = next(b for b in upstream.requests if b["messages"][-1]["content"] == SELF_REPORT_PROMPT)
    assert stage["logprobs"] is True and stage["messages"][0] == {
        "role": "system",
        "content": "Reply with a number.",
    }
    assert (
        judge["max_tokens"] == 1
        and judge["logprobs"] is True
        and "What is 0 + 0?" in judge["messages"][0]["content"]
    )
    assert sample["messages"] == stage["messages"] and "logprobs" not in sample and sample["max_tokens"] == 8
    assert (
        follow_up["messages"][:-2] == stage["messages"] and follow_up["messages"][-2]["role"] == "assistant"
    )


async def test_recorded_answers_are_scored_without_asking_the_stage_again(tmp_path: Path) -> None:
    recorded = tmp_path / "old.jsonl"
    await run(recorded, Upstream(), CollectOptions(concurrency=1))
    old = {(r["query_id"], r["model"]): r for r in rows(recorded)}
    old[("q1", "fast")]["response"] = "7"  # a recorded answer, whatever the stage would say today
    upstream = Upstream()
    options = CollectOptions(concurrency=1, scorer_calls=CALLS, answers_from=old)
    await run(tmp_path / "new.jsonl", upstream, options)
    new = {r["query_id"]: r for r in rows(tmp_path / "new.jsonl")}
    assert new["q1"]["response"] == "7" and new["q1"]["correct"] == old[("q1", "fast")]["correct"]
    assert "scorer_calls" in new["q1"]
    follow_ups = [b for b in upstream.requests if b["messages"][-1]["content"] == SELF_REPORT_PROMPT]
    assert {"role": "assistant", "content": "7"} in [b["messages"][-2] for b in follow_ups]
    # No call at temperature 0 without logprobs... only the extra calls: 3 x (1 + 4 + 1).
    assert len(upstream.requests) == 3 * 6
    assert recorded_rows(tmp_path / "new.jsonl")[("q1", "fast")]["response"] == "7"


async def test_models_not_chosen_get_no_scorer_calls(tmp_path: Path) -> None:
    calls = ScorerCallsOptions(
        scorers={"self_report": CallSettings(prompt=SELF_REPORT_PROMPT)}, models=frozenset({"other"})
    )
    await run(tmp_path / "runs.jsonl", Upstream(), CollectOptions(concurrency=1, scorer_calls=calls))
    assert all("scorer_calls" not in row for row in rows(tmp_path / "runs.jsonl"))


async def test_a_failed_extra_call_is_recorded_as_an_error_and_the_row_kept(tmp_path: Path) -> None:
    upstream = Upstream()

    def handler(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["model"] == "up-judge":
            return httpx.Response(400, text="no logprobs here")
        return upstream(request)

    with RunsWriter(tmp_path / "runs.jsonl") as writer:
        options = CollectOptions(
            concurrency=1,
            scorer_calls=ScorerCallsOptions(scorers={"verifier": VERIFIER_CALL}, targets={"judge": VERIFIER}),
        )
        await collect(PROMPTS, [STAGE], writer, set(), options, transport=httpx.MockTransport(handler))
    (row, *_) = rows(tmp_path / "runs.jsonl")
    failed = row["scorer_calls"]["verifier"]
    assert "HTTP 400" in failed["error"]
    # The settings the call was made with and what was spent before it failed (nothing), as any entry.
    assert failed["model"] == "judge" and failed["prompt"] == VERIFIER_PROMPT and failed["cost_usd"] == 0.0


def test_options_refuse_a_logprob_scorer_and_an_unknown_own_model() -> None:
    with pytest.raises(ValueError, match="not a black-box scorer"):
        ScorerCallsOptions(scorers={"mean_token_negentropy": CallSettings()})
    with pytest.raises(ValueError, match="not a target"):
        ScorerCallsOptions(scorers={"verifier": VERIFIER_CALL})
