"""Collection engine against httpx.MockTransport: rows, grading, cost, retries, resume after interruption."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import orjson
import pytest

from collection.collector import CollectOptions, build_row, collect, request_body
from collection.prompts import Prompt
from collection.runs_writer import RunsWriter, done_pairs
from collection.targets import Target
from money import Price
from money.charges import call_charge

PROMPTS = [
    Prompt(query_id=f"q{i}", prompt=f"question {i}", answer="B", grader="multiple_choice", dataset="unit")
    for i in range(4)
]
TARGETS = [
    Target(
        name="small",
        base_url="http://small.test/v1",
        model="up-small",
        price=Price(input_per_mtok=1.0, output_per_mtok=2.0),
    ),
    Target(
        name="large",
        base_url="http://large.test/v1",
        model="up-large",
        price=Price(input_per_mtok=10.0, output_per_mtok=20.0),
    ),
]


def _answer(letter: str) -> dict:
    content = [
        {
            "token": letter,
            "logprob": -0.1,
            "bytes": None,
            "top_logprobs": [
                {"token": letter, "logprob": -0.1, "bytes": None},
                {"token": "A", "logprob": -2.5, "bytes": None},
            ],
        },
    ]
    return {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": letter},
                "logprobs": {"content": content},
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 1},
    }


class Upstream:
    """Scripted upstreams: ``small`` answers A, ``large`` answers B; records every request body."""

    def __init__(self, fail_first: dict[str, int] | None = None, dead: set[str] | None = None) -> None:
        self.requests: list[dict] = []
        self.fail_first = dict(fail_first or {})
        self.dead = dead or set()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        query = body["messages"][-1]["content"]
        if query in self.dead:
            return httpx.Response(500, text="boom")
        if self.fail_first.get(query, 0) > 0:
            self.fail_first[query] -= 1
            return httpx.Response(503, text="busy")
        return httpx.Response(200, json=_answer("A" if body["model"] == "up-small" else "B"))


async def _run(path: Path, upstream: Upstream, options: CollectOptions | None = None):
    with RunsWriter(path) as writer:
        return await collect(
            PROMPTS,
            TARGETS,
            writer,
            done_pairs(path),
            options or CollectOptions(retries=1),
            transport=httpx.MockTransport(upstream),
        )


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_every_pair_is_recorded_with_grade_cost_and_logprobs(tmp_path: Path) -> None:
    path, upstream = tmp_path / "runs.jsonl", Upstream()
    summary = await _run(path, upstream, CollectOptions(top_logprobs=7, max_tokens=1))
    rows = _rows(path)
    assert summary.written == 8 and summary.failed == 0
    assert {(r["query_id"], r["model"]) for r in rows} == {
        (p.query_id, t.name) for p in PROMPTS for t in TARGETS
    }
    small = next(r for r in rows if r["model"] == "small")
    large = next(r for r in rows if r["model"] == "large")
    assert small["correct"] == 0.0 and large["correct"] == 1.0
    assert small["cost_usd"] == (100 * 1.0 + 1 * 2.0) / 1e6
    assert large["cost_usd"] == (100 * 10.0 + 1 * 20.0) / 1e6
    assert small["logprobs"][0]["top_logprobs"][1]["token"] == "A"
    # Kept without the tokens' bytes (their text says them); with the request's size and cap.
    assert "bytes" not in small["logprobs"][0] and "bytes" not in small["logprobs"][0]["top_logprobs"][1]
    assert small["completion_cap"] == 1 and small["request_bytes"] > 0
    assert small["dataset"] == "unit" and small["latency_ms"] >= 0
    sent = upstream.requests[0]
    assert (
        sent["logprobs"] is True and sent["top_logprobs"] == 7 and sent["max_tokens"] == 1 and sent["n"] == 1
    )


async def test_transient_503_is_retried(tmp_path: Path) -> None:
    upstream = Upstream(fail_first={"question 0": 1})
    summary = await _run(tmp_path / "runs.jsonl", upstream)
    assert summary.failed == 0 and summary.written == 8


async def test_rerun_after_failures_only_calls_the_missing_pairs(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    first = await _run(path, Upstream(dead={"question 2"}))
    assert first.failed == 2 and first.written == 6 and "q2" in first.errors[0]
    assert ("q2", "small") not in done_pairs(path)

    upstream = Upstream()
    second = await _run(path, upstream)
    assert second.written == 2 and second.skipped == 6
    assert {r["messages"][-1]["content"] for r in upstream.requests} == {"question 2"}
    assert len(_rows(path)) == 8


async def test_torn_last_line_from_an_interrupted_write_is_dropped_and_redone(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    await _run(path, Upstream())
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:25])  # crash mid-write
    torn = json.loads(lines[-1])
    assert (torn["query_id"], torn["model"]) not in done_pairs(path)
    upstream = Upstream()
    summary = await _run(path, upstream)
    assert summary.written == 1
    assert len(_rows(path)) == 8  # every line parses again


class CutUpstream(Upstream):
    """Every answer stops with ``finish_reason: length`` after its one completion token."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        response = super().__call__(request)
        body = response.json()
        body["choices"][0]["finish_reason"] = "length"
        return httpx.Response(200, json=body)


async def test_an_answer_cut_at_a_cap_the_run_did_not_set_is_recorded_truncated(tmp_path: Path) -> None:
    from dataclasses import replace

    from policies.request_defaults import RequestDefaults

    # The run sets no cap and the member's defaults do (1 token): a `length` stop is that cap's.
    member = replace(TARGETS[0], request_defaults=RequestDefaults.model_validate({"max_tokens": 1}))

    async def collect_cut(path: Path, options: CollectOptions) -> dict:
        """The one row of the first prompt to ``member``, whose every answer stops at `length`."""
        with RunsWriter(path) as writer:
            transport = httpx.MockTransport(CutUpstream())
            await collect(PROMPTS[:1], [member], writer, set(), options, transport=transport)
        (row,) = _rows(path)
        return row

    row = await collect_cut(tmp_path / "runs.jsonl", CollectOptions())
    assert row["truncated"] is True
    # The run's own cap (1 token): the same stop is what was asked for.
    row = await collect_cut(tmp_path / "capped.jsonl", CollectOptions(max_tokens=1))
    assert row["truncated"] is False


def test_a_row_carries_the_cached_and_reasoning_counts_and_is_priced_by_them() -> None:
    target = Target(
        name="cached",
        base_url="http://cached.test/v1",
        model="up-cached",
        price=Price(
            input_per_mtok=3.0, output_per_mtok=15.0, cache_read_per_mtok=0.3, cache_write_per_mtok=3.75
        ),
    )
    body = {
        "choices": [{"message": {"content": "B"}}],
        # Anthropic's additive form behind an OpenAI-compatible proxy: 3 + 100 + 12304 input tokens.
        "usage": {"input_tokens": 3, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 12304,
                  "output_tokens": 550},
    }  # fmt: skip
    row = build_row(PROMPTS[0], target, body, 1.0, False, request_body(PROMPTS[0], target, CollectOptions()))
    assert (row["prompt_tokens"], row["completion_tokens"]) == (12407, 550)
    assert (row["cached_tokens"], row["cache_write_tokens"]) == (100, 12304) and "reasoning_tokens" not in row
    assert row["cost_usd"] == pytest.approx((3 * 3 + 100 * 0.3 + 12304 * 3.75 + 550 * 15) / 1e6)


TOKEN_PRICED = Target(
    name="tok",
    base_url="http://tok.test/v1",
    model="up-tok",
    price=Price(input_per_mtok=1.0, output_per_mtok=2.0),
)


@pytest.mark.parametrize(
    "usage",
    [
        None,
        {},
        {"prompt_tokens": 12.0, "completion_tokens": 1.0},  # floats are no counts
        {"prompt_tokens": True, "completion_tokens": True},  # nor are bools
        {"prompt_tokens": 12},  # one count alone
    ],
    ids=["none", "empty", "floats", "bools", "one-count"],
)
def test_a_token_priced_answer_without_usable_usage_is_charged_as_every_call_never_free(usage) -> None:
    sent = request_body(PROMPTS[0], TOKEN_PRICED, CollectOptions())
    body = {"choices": [{"message": {"content": "B"}}], **({} if usage is None else {"usage": usage})}
    row = build_row(PROMPTS[0], TOKEN_PRICED, body, 1.0, False, sent)
    charged = call_charge(TOKEN_PRICED.price, usage, orjson.dumps(sent), answer=body)
    assert row["cost_usd"] == charged.usd > 0
    assert (row["prompt_tokens"], row["completion_tokens"]) == (
        charged.prompt_tokens,
        charged.completion_tokens,
    )
    # The estimate errs high: at least the request's bytes as prompt tokens.
    assert row["prompt_tokens"] >= len(orjson.dumps(sent))


def test_a_row_with_usage_is_charged_its_counts() -> None:
    sent = request_body(PROMPTS[0], TOKEN_PRICED, CollectOptions())
    body = {
        "choices": [{"message": {"content": "B"}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 1},
    }
    row = build_row(PROMPTS[0], TOKEN_PRICED, body, 1.0, False, sent)
    assert (row["prompt_tokens"], row["completion_tokens"]) == (12, 1)
    assert row["cost_usd"] == pytest.approx((12 * 1.0 + 1 * 2.0) / 1e6)
