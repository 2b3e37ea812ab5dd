"""Learning from traffic on /v1/messages: a sampled request becomes one labelled row per pool model,
like a chat request (the engine ran the translated chat request; the sampler reuses its answers)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from learning_support import learning_block

from tests.support.gateway_testkit import until
from tests.support.scripted_upstream import ok
from tests.support.traffic_rows import stored_rows

SMALL_COST = (10 * 0.1 + 5 * 0.2) / 1e6  # usage (10, 5) at $0.1/$0.2 per Mtok


def test_a_sampled_messages_request_gets_one_labelled_row_per_pool_model(
    start_gateway: Callable, make_settings: Callable, upstream, tmp_path: Path
) -> None:
    store = f"file://{tmp_path / 'traffic.jsonl'}"
    upstream.set_default("up-small", ok("Paris", confidence=0.99))
    upstream.set_default("up-medium", ok("Lyon", confidence=0.99))
    upstream.set_default("up-large", ok("Paris", confidence=0.99))
    running = start_gateway(make_settings(learning=learning_block(store)))
    client = running.anthropic_client()
    raw = client.messages.with_raw_response.create(
        model="cascade",
        max_tokens=16,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
    )
    assert raw.parse().content[0].text == "Paris"
    request_id = raw.headers["x-request-id"]
    assert until(lambda: len(stored_rows(store)) >= 3, 20.0)
    rows = {(r.query_id, r.model): r for r in stored_rows(store)}
    assert set(rows) == {(request_id, m) for m in ("small", "medium", "large")}
    assert [rows[request_id, m].correct for m in ("small", "medium", "large")] == [1.0, 0.0, 1.0]
    assert rows[request_id, "small"].cost_usd == pytest.approx(SMALL_COST)
    assert all(r.tier == "balanced" and r.score is not None for r in rows.values())
    # The sampled medium stage saw the same translated chat request as the served ones.
    assert upstream.calls("up-medium")[0].body["messages"] == upstream.calls("up-small")[0].body["messages"]
