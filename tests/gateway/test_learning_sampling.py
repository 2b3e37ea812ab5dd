"""Learning from traffic: a sampled cascade request becomes one labelled row per pool model.

Through the official OpenAI SDK against the real app, with the scripted upstream, the JSONL file
store and the real PostgreSQL (a private schema per test). The test policy's pool is small ->
medium -> large (large is the strongest, so the default reference).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from learning_support import learning_block, postgres_store_url, registry_value

from policies import score_logprobs
from tests.support.gateway_testkit import until
from tests.support.postgres import drop_schema
from tests.support.scripted_upstream import Reply, error, ok
from tests.support.traffic_rows import stored_rows
from traffic.rows import TrafficRow

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
SMALL_COST = (10 * 0.1 + 5 * 0.2) / 1e6  # usage (10, 5) at $0.1/$0.2 per Mtok


@pytest.fixture
def postgres_schema() -> Iterator[str]:
    """A private schema on the test PostgreSQL, dropped afterwards."""
    schema = f"learning_test_{uuid.uuid4().hex[:12]}"
    yield schema
    drop_schema(schema)


@pytest.fixture(params=["file", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each traffic store in turn: a JSONL file, then PostgreSQL."""
    if request.param == "file":
        return f"file://{tmp_path / 'traffic.jsonl'}"
    return postgres_store_url(request.getfixturevalue("postgres_schema"))


def rows_when(url: str, count: int, timeout_s: float = 20.0) -> dict[tuple[str, str], TrafficRow]:
    """The store's rows by (query_id, model), once it holds at least ``count``."""
    found: list[TrafficRow] = []

    def enough() -> bool:
        found[:] = stored_rows(url)
        return len(found) >= count

    assert until(enough, timeout_s), f"the store holds {len(found)} rows, expected {count}"
    return {(r.query_id, r.model): r for r in found}


def test_accepted_request_gets_one_labelled_row_per_pool_model(
    start_gateway: Callable, make_settings: Callable, upstream, store_url: str
) -> None:
    upstream.set_default("up-small", ok("Paris", confidence=0.99))
    upstream.set_default("up-medium", ok("Lyon", confidence=0.99))
    upstream.set_default("up-large", ok("Paris", confidence=0.99))
    running = start_gateway(make_settings(learning=learning_block(store_url)))
    raw = running.client().chat.completions.with_raw_response.create(model="cascade", messages=MESSAGES)
    request_id = raw.headers["x-request-id"]
    assert raw.headers["x-cascade-models-called"] == "small"
    assert float(raw.headers["x-cascade-cost-usd"]) == pytest.approx(SMALL_COST)  # no shadow cost

    rows = rows_when(store_url, 3)
    assert set(rows) == {(request_id, m) for m in ("small", "medium", "large")}
    small, medium, large = rows[request_id, "small"], rows[request_id, "medium"], rows[request_id, "large"]
    # Labels: agreement with the reference (large); the reference agrees with itself.
    assert (small.correct, medium.correct, large.correct) == (1.0, 0.0, 1.0)
    assert (small.judge, medium.judge, large.judge) == ("exact", "exact", "reference")
    # Costs: the configured prices of each call's usage.
    assert small.cost_usd == pytest.approx(SMALL_COST)
    assert medium.cost_usd == pytest.approx(0.0001)
    assert large.cost_usd == pytest.approx(0.001)
    for row in rows.values():
        assert (row.prompt_tokens, row.completion_tokens) == (10, 5)
        assert row.tier == "balanced" and row.policy_id == running.gateway.policy.policy_id
        assert row.logprobs and row.score is not None and row.latency_ms is not None
        assert row.score == pytest.approx(score_logprobs(row.logprobs, "mean_token_negentropy", 5))
        assert row.prompt is None and row.response is None  # log_text is off
    assert small.score == pytest.approx(float(raw.headers["x-cascade-score"]), rel=1e-5)

    # The request's own answer was reused; the others were called once each, as scored stages.
    assert len(upstream.calls("up-small")) == 1
    for model_id in ("up-medium", "up-large"):
        (call,) = upstream.calls(model_id)
        assert call.body["logprobs"] is True and call.body["top_logprobs"] == 5
        assert call.body["messages"] == MESSAGES and "stream" not in call.body

    gateway = running.gateway
    assert registry_value(gateway, "cascade_learning_sampled_total", tier="balanced") == 1
    assert registry_value(gateway, "cascade_shadow_calls_total", model="medium", outcome="ok") == 1
    assert registry_value(gateway, "cascade_shadow_cost_usd_total", model="large") == pytest.approx(0.001)
    assert registry_value(gateway, "cascade_shadow_cost_usd_total", model="small") == 0
    assert registry_value(gateway, "cascade_judge_outcomes_total", judge="exact", outcome="agree") == 1
    assert registry_value(gateway, "cascade_judge_outcomes_total", judge="exact", outcome="disagree") == 1
    assert registry_value(gateway, "cascade_learning_rows_written_total") == 3
    assert registry_value(gateway, "cascade_learning_store_up") == 1
    assert registry_value(gateway, "cascade_learning_dropped_total") == 0
    # Shadow spend is never a client's: the request metrics hold only the small call.
    assert registry_value(gateway, "cascade_cost_usd_total", model="medium") == 0
    assert registry_value(gateway, "cascade_cost_usd_total", model="small") == pytest.approx(SMALL_COST)
    spent = registry_value(gateway, "cascade_shadow_spend_window_usd")
    assert spent == pytest.approx(0.0011)


def test_escalated_stream_reuses_scored_stages_and_calls_the_final_stage_again_with_logprobs(
    start_gateway: Callable, make_settings: Callable, upstream, tmp_path: Path
) -> None:
    url = f"file://{tmp_path / 'traffic.jsonl'}"
    upstream.set_default("up-small", ok("Lyon", confidence=0.3))
    upstream.set_default("up-medium", ok("Paris", confidence=0.3))
    upstream.set_default("up-large", ok("Paris", confidence=0.99))
    running = start_gateway(make_settings(learning=learning_block(url)))
    stream = running.client().chat.completions.create(
        model="cascade/chain", messages=MESSAGES, stream=True, max_tokens=32
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "Paris"

    rows = rows_when(url, 3)
    by_model = {model: row for (_, model), row in rows.items()}
    assert (by_model["small"].correct, by_model["medium"].correct, by_model["large"].correct) == (0, 1, 1)
    assert by_model["large"].score is not None and by_model["large"].logprobs  # scored, unlike the stream
    assert len(upstream.calls("up-small")) == len(upstream.calls("up-medium")) == 1
    live, shadow = upstream.calls("up-large")
    assert live.body["stream"] is True and "logprobs" not in live.body
    assert shadow.body["logprobs"] is True and "stream" not in shadow.body
    assert shadow.body["max_tokens"] == 32  # the client's fields, as the cascade sends them


def test_sample_rate_zero_samples_nothing(
    start_gateway: Callable, make_settings: Callable, upstream, tmp_path: Path
) -> None:
    path = tmp_path / "traffic.jsonl"
    running = start_gateway(make_settings(learning=learning_block(f"file://{path}", sample_rate=0.0)))
    client = running.client()
    for _ in range(20):
        client.chat.completions.create(model="cascade", messages=MESSAGES)
    assert not until(lambda: len(upstream.calls()) > 20, timeout_s=1.0)
    assert {c.model for c in upstream.calls()} == {"up-small"}
    assert registry_value(running.gateway, "cascade_learning_sampled_total") == 0
    assert not path.exists()


def test_passthrough_requests_are_not_sampled(
    start_gateway: Callable, make_settings: Callable, upstream, tmp_path: Path
) -> None:
    running = start_gateway(make_settings(learning=learning_block(f"file://{tmp_path / 't.jsonl'}")))
    running.client().chat.completions.create(model="medium", messages=MESSAGES)
    assert not until(lambda: len(upstream.calls()) > 1, timeout_s=1.0)
    assert registry_value(running.gateway, "cascade_learning_sampled_total") == 0


def test_failed_shadow_call_is_a_missing_row_not_a_wrong_one_and_says_why(
    start_gateway: Callable, make_settings: Callable, upstream, tmp_path: Path, caplog
) -> None:
    url = f"file://{tmp_path / 'traffic.jsonl'}"
    upstream.set_default("up-small", ok("Paris", confidence=0.99))
    upstream.set_default("up-medium", error(500))
    upstream.set_default("up-large", ok("Paris", confidence=0.99))
    running = start_gateway(make_settings(learning=learning_block(url)))
    running.client().chat.completions.create(model="cascade", messages=MESSAGES)

    rows = rows_when(url, 2)
    gateway = running.gateway
    assert until(lambda: registry_value(gateway, "cascade_shadow_calls_total", outcome="failed") == 1)
    assert {model for _, model in rows} == {"small", "large"}  # no row for medium
    assert all(row.correct == 1.0 for row in rows.values())
    assert registry_value(gateway, "cascade_shadow_calls_total", model="medium", outcome="failed") == 1
    assert registry_value(gateway, "cascade_shadow_cost_usd_total", model="medium") == 0
    assert registry_value(gateway, "cascade_judge_outcomes_total", outcome="disagree") == 0
    failures = [r.fields for r in caplog.records if r.getMessage() == "shadow_call_failed"]
    assert [(f["model"], f["kind"], f["status"]) for f in failures] == [("medium", "http", 500)], failures


def test_failed_reference_leaves_every_label_missing(
    start_gateway: Callable, make_settings: Callable, upstream, tmp_path: Path
) -> None:
    url = f"file://{tmp_path / 'traffic.jsonl'}"
    upstream.set_default("up-small", ok("Paris", confidence=0.99))
    upstream.set_default("up-medium", ok("Paris", confidence=0.99))
    upstream.set_default("up-large", error(503))
    running = start_gateway(make_settings(learning=learning_block(url)))
    running.client().chat.completions.create(model="cascade", messages=MESSAGES)

    rows = rows_when(url, 2)
    assert {model for _, model in rows} == {"small", "medium"}
    assert all(row.correct is None and row.judge is None for row in rows.values())
    outcomes = registry_value(running.gateway, "cascade_judge_outcomes_total", outcome="no_reference")
    assert outcomes == 2


def test_configured_reference_and_text_logging(
    start_gateway: Callable, make_settings: Callable, upstream, tmp_path: Path
) -> None:
    url = f"file://{tmp_path / 'traffic.jsonl'}"
    upstream.set_default("up-small", ok("Paris", confidence=0.99))
    upstream.set_default("up-medium", ok("Lyon", confidence=0.99))
    upstream.set_default("up-large", ok("Paris", confidence=0.99))
    block = learning_block(url, reference_model="medium", log_text=True)
    running = start_gateway(make_settings(learning=block))
    running.client().completions.create(model="cascade", prompt="The capital of France is")

    rows = {model: row for (_, model), row in rows_when(url, 3).items()}
    assert (rows["small"].correct, rows["medium"].correct, rows["large"].correct) == (0, 1, 0)
    assert rows["medium"].judge == "reference"
    assert rows["large"].prompt == "The capital of France is" and rows["large"].response == "Paris"
    # Legacy completions logprobs are stored in the runs table's content form.
    assert rows["large"].logprobs and {"token", "logprob", "top_logprobs"} <= set(rows["large"].logprobs[0])


def test_a_client_asking_for_fewer_alternatives_does_not_trim_the_stored_row(
    start_gateway: Callable, make_settings: Callable, upstream, tmp_path: Path
) -> None:
    url = f"file://{tmp_path / 'traffic.jsonl'}"
    for model_id in ("up-small", "up-medium", "up-large"):
        upstream.set_default(model_id, ok("Paris", confidence=0.99))
    running = start_gateway(make_settings(learning=learning_block(url)))
    answer = running.client().chat.completions.create(
        model="cascade", messages=MESSAGES, logprobs=True, top_logprobs=1
    )
    content = answer.choices[0].logprobs.content
    assert content and all(len(entry.top_logprobs) == 1 for entry in content)  # the client's view

    small = {model: row for (_, model), row in rows_when(url, 3).items()}["small"]
    assert small.logprobs and all(len(entry["top_logprobs"]) == 5 for entry in small.logprobs)
    assert small.score == pytest.approx(score_logprobs(small.logprobs, "mean_token_negentropy", 5))


def confident_body(usage: dict[str, Any]) -> dict[str, Any]:
    """A confident chat answer ("Paris", five alternatives per token) carrying ``usage`` as given."""
    alternatives = [{"token": "Paris", "logprob": -0.01}] + [
        {"token": f"alt{j}", "logprob": -6.0} for j in range(4)
    ]
    entry = {"token": "Paris", "logprob": -0.01, "top_logprobs": alternatives}
    choice = {"index": 0, "message": {"role": "assistant", "content": "Paris"}, "finish_reason": "stop"}
    return {
        "id": "cmpl-usage-form",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "up-small",
        "choices": [{**choice, "logprobs": {"content": [entry]}}],
        "usage": usage,
    }


def small_row(
    start_gateway: Callable, make_settings: Callable, upstream, tmp_path: Path, small: Reply
) -> TrafficRow:
    """The traffic row of the cheap stage ``small`` of one accepted, sampled request."""
    url = f"file://{tmp_path / 'traffic.jsonl'}"
    upstream.set_default("up-small", small)
    upstream.set_default("up-medium", ok("Lyon", confidence=0.99))
    upstream.set_default("up-large", ok("Paris", confidence=0.99))
    running = start_gateway(make_settings(learning=learning_block(url)))
    raw = running.client().chat.completions.with_raw_response.create(model="cascade", messages=MESSAGES)
    assert raw.headers["x-cascade-models-called"] == "small"
    return {model: row for (_, model), row in rows_when(url, 3).items()}["small"]


def test_a_row_whose_upstream_reported_no_usage_carries_the_counts_it_was_charged(
    start_gateway: Callable, make_settings: Callable, upstream, tmp_path: Path
) -> None:
    small = small_row(
        start_gateway, make_settings, upstream, tmp_path, ok("Paris", confidence=0.99, usage=None)
    )
    # Charged its estimate (the prompt's byte bound, the answer's bytes): re-priced by the same counts.
    assert small.prompt_tokens > 0 and small.completion_tokens > 0
    assert small.cost_usd == pytest.approx((small.prompt_tokens * 0.1 + small.completion_tokens * 0.2) / 1e6)


def test_a_row_whose_upstream_reported_the_additive_anthropic_usage_form_carries_its_counts(
    start_gateway: Callable, make_settings: Callable, upstream, tmp_path: Path
) -> None:
    usage = {"input_tokens": 4, "cache_read_input_tokens": 6, "output_tokens": 5}
    small = small_row(start_gateway, make_settings, upstream, tmp_path, Reply(body=confident_body(usage)))
    assert (small.prompt_tokens, small.completion_tokens) == (10, 5)  # cached prompt tokens included
    assert small.cost_usd > 0
