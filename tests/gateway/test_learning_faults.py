"""Learning under faults: full queue, spend cap, store down or slow (and back), shutdown.

Clients must never notice: same status, no added latency, readiness unchanged. Samples that cannot
be handled are dropped and counted (``cascade_learning_dropped_total{reason}``), and sampling
resumes by itself when the store comes back. PostgreSQL is the real one, reached through a TCP proxy
the tests can close, reopen and freeze.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from learning_support import TcpProxy, learning_block, postgres_store_url, registry_value

from tests.support.gateway_testkit import stop, until
from tests.support.postgres import drop_schema
from tests.support.scripted_upstream import ok
from tests.support.traffic_rows import stored_rows

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture
def postgres_schema() -> Iterator[str]:
    """A private schema on the test PostgreSQL, dropped afterwards."""
    schema = f"learning_fault_{uuid.uuid4().hex[:12]}"
    yield schema
    drop_schema(schema)


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    """A proxy to the test PostgreSQL, not listening yet (``open()`` it). Request it before
    ``start_gateway``: fixtures end in reverse order, so the gateway stops first."""
    proxy = TcpProxy(5432)
    yield proxy
    proxy.stop()


def dropped(gateway, reason: str) -> float:
    return registry_value(gateway, "cascade_learning_dropped_total", reason=reason)


def ask(running, n: int = 1) -> None:
    """Send ``n`` cascade requests (each must succeed)."""
    client = running.client()
    for _ in range(n):
        completion = client.chat.completions.create(model="cascade", messages=MESSAGES)
        assert completion.choices[0].message.content


def test_full_queue_drops_and_counts_without_slowing_clients(
    start_gateway: Callable, make_settings: Callable, upstream, tmp_path: Path
) -> None:
    upstream.set_default("up-medium", ok("Paris", delay_s=60))  # shadow calls outlast the test
    block = learning_block(f"file://{tmp_path / 't.jsonl'}", queue_size=1, concurrency=1)
    limits = {"request_timeout_s": 10, "shutdown_grace_s": 0.5}
    running = start_gateway(make_settings(learning=block, limits=limits))
    ask(running, 6)
    gateway = running.gateway
    # Every client was answered while the first sample's shadow call was still running.
    assert registry_value(gateway, "cascade_learning_rows_written_total") == 0
    assert len(upstream.calls("up-medium")) == 1
    # One sample in the worker, one in the queue, the other four dropped.
    assert dropped(gateway, "queue_full") == 4
    assert registry_value(gateway, "cascade_learning_sampled_total", tier="balanced") == 6
    assert registry_value(gateway, "cascade_learning_queue_depth") == 1


def test_spend_cap_drops_samples_before_buying_their_calls(
    start_gateway: Callable, make_settings: Callable, upstream, tmp_path: Path
) -> None:
    # One sample reserves medium + large at their per-query prices: $0.0011; the cap fits one.
    block = learning_block(f"file://{tmp_path / 't.jsonl'}", max_shadow_usd_per_hour=0.0015)
    running = start_gateway(make_settings(learning=block))
    gateway = running.gateway
    ask(running)
    assert until(lambda: registry_value(gateway, "cascade_learning_rows_written_total") == 3)
    ask(running, 2)
    assert until(lambda: dropped(gateway, "spend_cap") == 2)
    assert len(upstream.calls("up-medium")) == len(upstream.calls("up-large")) == 1
    assert registry_value(gateway, "cascade_shadow_cost_usd_total") == pytest.approx(0.0011)
    assert registry_value(gateway, "cascade_shadow_spend_window_usd") == pytest.approx(0.0011)
    assert registry_value(gateway, "cascade_shadow_spend_cap_usd") == 0.0015  # what alerts compare with


def test_postgres_down_then_back_without_restart(
    proxy: TcpProxy, postgres_schema: str, start_gateway: Callable, make_settings: Callable, upstream
) -> None:
    url = postgres_store_url(postgres_schema, port=proxy.port, connect_timeout_s=1.0)
    running = start_gateway(make_settings(learning=learning_block(url)))
    gateway = running.gateway
    ask(running, 3)  # nothing listens on the proxy's port: the store is down; clients are answered
    assert until(lambda: dropped(gateway, "store_error") >= 1)
    assert registry_value(gateway, "cascade_learning_store_up") == 0
    ready = running.http.get("/readyz", timeout=5)
    assert ready.status_code == 200 and ready.json() == {"ready": True}

    proxy.open()  # the store is back

    def written() -> bool:
        ask(running)
        return registry_value(gateway, "cascade_learning_rows_written_total") >= 3

    assert until(written, timeout_s=20)
    rows = stored_rows(postgres_store_url(postgres_schema))
    assert len(rows) >= 3 and {r.model for r in rows} == {"small", "medium", "large"}
    assert registry_value(gateway, "cascade_learning_store_up") == 1


def test_slow_postgres_drops_samples_and_clients_do_not_wait(
    proxy: TcpProxy, postgres_schema: str, start_gateway: Callable, make_settings: Callable, upstream
) -> None:
    proxy.open()
    url = postgres_store_url(postgres_schema, port=proxy.port, connect_timeout_s=1.0)
    block = learning_block(url, store_timeout_s=0.5)
    running = start_gateway(make_settings(learning=block))
    gateway = running.gateway
    ask(running)
    assert until(lambda: registry_value(gateway, "cascade_learning_rows_written_total") == 3, 20)

    proxy.freeze()  # connections stay open, nothing comes back
    ask(running, 3)  # answered whatever the store does (its writes are bounded by store_timeout_s)
    assert until(lambda: dropped(gateway, "store_error") >= 1, 10)
    assert running.http.get("/readyz", timeout=5).status_code == 200

    proxy.thaw()
    proxy.close()  # cut the stuck connections, then listen again
    proxy.open()

    def written() -> bool:
        ask(running)
        return registry_value(gateway, "cascade_learning_rows_written_total") >= 6

    assert until(written, timeout_s=30)


def test_file_store_unwritable_then_writable(
    start_gateway: Callable, make_settings: Callable, upstream, tmp_path: Path
) -> None:
    blocker = tmp_path / "traffic"
    blocker.write_text("a file where the store's directory should be")
    path = blocker / "traffic.jsonl"
    running = start_gateway(make_settings(learning=learning_block(f"file://{path}")))
    gateway = running.gateway
    ask(running, 2)
    assert until(lambda: dropped(gateway, "store_error") >= 1)

    blocker.unlink()  # the directory can be created now

    def written() -> bool:
        ask(running)
        return path.exists() and len(stored_rows(f"file://{path}")) >= 3

    assert until(written, timeout_s=20)


def test_shutdown_drops_what_it_cannot_finish_within_the_grace(
    start_served_gateway: Callable, make_settings: Callable, upstream, tmp_path: Path
) -> None:
    start_gateway = start_served_gateway  # uvicorn's shutdown, joined within its bound
    upstream.set_default("up-medium", ok("Paris", delay_s=60.0))  # longer than stop() waits
    block = learning_block(f"file://{tmp_path / 't.jsonl'}", concurrency=1)
    settings = make_settings(learning=block, limits={"request_timeout_s": 10, "shutdown_grace_s": 0.5})
    running = start_gateway(settings)
    gateway = running.gateway
    ask(running, 3)  # one sample in flight (its medium call takes a minute), two queued
    assert until(lambda: len(upstream.calls("up-medium")) == 1)

    stop(running)  # joins for at most 15 s: only a shutdown that cut the call at the grace ends in time
    assert not running.thread.is_alive()
    assert dropped(gateway, "shutdown") == 3
    # The cut call is charged its worst case (medium's per-query price), never nothing.
    cancelled = registry_value(gateway, "cascade_shadow_calls_total", model="medium", outcome="cancelled")
    assert cancelled == 1
    assert registry_value(gateway, "cascade_shadow_cost_usd_total", model="medium") == pytest.approx(0.0001)
