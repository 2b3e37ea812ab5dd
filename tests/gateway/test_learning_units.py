"""Units of the traffic sampler: the shadow spend window, the batched row writer, sample texts,
the answers a drawn request keeps."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

import pytest

from gateway.learning.answers import DrawnRequest, StageAnswer, question_text
from gateway.learning.budget import ShadowBudget
from gateway.learning.writer import RowWriter
from gateway.wire.requests import parse_request
from money.charges import NOT_BILLED, Charge
from policies import build_policy
from tests.support.gateway_testkit import POLICY_DOCUMENT
from traffic.file_store import FileStore
from traffic.rows import TrafficRow
from traffic.store import StoreUnavailableError


class Clock:
    """A clock tests move by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_budget_refuses_what_would_pass_the_cap_and_frees_it_an_hour_later() -> None:
    clock = Clock()
    budget = ShadowBudget(0.002, clock=clock)
    first = budget.reserve(0.0015)
    assert first is not None
    assert budget.reserve(0.001) is None  # 0.0025 > 0.002
    budget.settle(first, 0.0004)  # the calls cost less than their worst case
    assert budget.spent_usd() == pytest.approx(0.0004)
    clock.now += 10
    second = budget.reserve(0.0015)
    assert second is not None and budget.spent_usd() == pytest.approx(0.0019)
    clock.now += 3589
    assert budget.reserve(0.0002) is None  # both still inside the hour
    clock.now += 1
    assert budget.spent_usd() == pytest.approx(0.0015)  # the first left the window
    assert budget.reserve(0.0005) is not None


def test_budget_of_zero_refuses_any_cost_but_lets_free_calls_through() -> None:
    budget = ShadowBudget(0.0)
    assert budget.reserve(1e-9) is None
    assert budget.reserve(0.0) is not None


def test_settling_an_expired_reservation_leaves_the_window_alone() -> None:
    clock = Clock()
    budget = ShadowBudget(1.0, clock=clock)
    hold = budget.reserve(0.5)
    assert hold is not None
    clock.now += 3600
    assert budget.spent_usd() == 0
    budget.settle(hold, 0.7)
    assert budget.spent_usd() == 0


def row(query: str, model: str = "small") -> TrafficRow:
    return TrafficRow(query_id=query, model=model, correct=1.0)


class FlakyStore:
    """A store whose writes fail, hang or succeed as the test says (the store seam)."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.batches: list[list[TrafficRow]] = []
        self.release = asyncio.Event()
        self.cancelled = 0  # hung writes the writer cancelled

    async def write_rows(self, batch: Sequence[TrafficRow]) -> int:
        if self.mode == "down":
            raise StoreUnavailableError("traffic store: connection refused")
        if self.mode == "hang":
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        self.batches.append(list(batch))
        return len(batch)

    async def export(self, since: datetime | None = None, where: Mapping[str, str] | None = None) -> list:
        return []

    async def purge(self, older_than: datetime) -> int:
        return 0

    async def close(self) -> None:
        return None


def make_writer(store: object, clock: Clock, events: dict[str, list]) -> RowWriter:
    return RowWriter(
        store,  # type: ignore[arg-type]
        batch_rows=2,
        flush_interval_s=60,
        timeout_s=0.2,
        retry_s=5.0,
        on_dropped=lambda reason, n: events["dropped"].append((reason, n)),
        on_written=lambda n: events["written"].append(n),
        on_store_up=lambda up: events["up"].append(up),
        clock=clock,
    )


async def test_writer_batches_rows_and_reports_what_was_written() -> None:
    store, clock = FlakyStore(), Clock()
    events: dict[str, list] = {"dropped": [], "written": [], "up": []}
    writer = make_writer(store, clock, events)
    assert writer.submit([row("q1")])
    await writer.flush(1.0)
    assert writer.submit([row("q2"), row("q2", "large")])
    await writer.flush(1.0)
    assert [len(b) for b in store.batches] == [1, 2]
    assert events == {"dropped": [], "written": [1, 2], "up": [True, True]}


async def test_writer_drops_a_failed_batch_pauses_and_resumes_by_itself() -> None:
    store, clock = FlakyStore(), Clock()
    events: dict[str, list] = {"dropped": [], "written": [], "up": []}
    writer = make_writer(store, clock, events)
    store.mode = "down"
    writer.submit([row("q1")])
    writer.submit([row("q2")])
    await writer.flush(1.0)
    assert events["dropped"] == [("store_error", 2)] and events["up"] == [False]
    assert not writer.accepting() and not writer.submit([row("q3")])
    store.mode = "ok"
    clock.now += 5.0  # the pause is over: the next sample goes through
    assert writer.accepting() and writer.submit([row("q4")])
    await writer.flush(1.0)
    assert [[r.query_id for r in batch] for batch in store.batches] == [["q4"]]
    assert events["up"] == [False, True]


async def test_writer_abandons_a_hung_write_and_drops_batches_until_it_ends() -> None:
    store, clock = FlakyStore(), Clock()
    events: dict[str, list] = {"dropped": [], "written": [], "up": []}
    writer = make_writer(store, clock, events)
    store.mode = "hang"
    writer.submit([row("q1")])
    # The flush returns while the store still has not answered (a hang guard, not a time bound:
    # a flush that waited for the store would wait for ever).
    await asyncio.wait_for(writer.flush(0.2), 30)
    assert not store.release.is_set() and store.batches == []
    assert events["dropped"] == [("store_error", 1)]
    clock.now += 5.0
    writer.submit([row("q2")])
    await writer.flush(0.2)  # the first write is still stuck: no second write is started
    assert events["dropped"] == [("store_error", 1), ("store_error", 1)]
    assert store.batches == []
    for _ in range(100):  # the cancellation reaches the abandoned write within a few loop turns
        if store.cancelled:
            break
        await asyncio.sleep(0)
    assert store.cancelled == 1 and store.batches == []  # cancelled: it can never store its batch


async def test_writer_refuses_rows_beyond_ten_batches_of_backlog() -> None:
    writer = make_writer(FlakyStore(), Clock(), {"dropped": [], "written": [], "up": []})
    accepted = [writer.submit([row(f"q{i}")]) for i in range(25)]
    assert accepted.count(True) == 20 and accepted[-1] is False


async def test_writer_against_the_file_store_skips_rows_it_already_holds(tmp_path: Path) -> None:
    events: dict[str, list] = {"dropped": [], "written": [], "up": []}
    store = FileStore(tmp_path / "traffic.jsonl")
    writer = make_writer(store, Clock(), events)
    writer.submit([row("q1"), row("q1", "large")])
    await writer.flush(5.0)
    writer.submit([row("q1")])
    await writer.flush(5.0)
    assert events["written"] == [2, 0]
    assert len(await store.export()) == 2


def test_question_and_answer_texts() -> None:
    chat = parse_request(
        b'{"model": "cascade", "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]}',
        "chat",
    )
    assert question_text(chat) == "Hi"
    turns = parse_request(
        b'{"model": "cascade", "messages": [{"role": "system", "content": "Be brief."},'
        b' {"role": "user", "content": "2+2?"}]}',
        "chat",
    )
    assert question_text(turns) == "system: Be brief.\n\nuser: 2+2?"
    legacy = parse_request(b'{"model": "cascade", "prompt": ["a", "b"]}', "completions")
    assert question_text(legacy) == "a\nb"
    tool = {"choices": [{"message": {"content": None, "tool_calls": [{"id": "1", "type": "function"}]}}]}
    answer = StageAnswer.from_reply(tool, 0.1, None, NOT_BILLED)
    assert answer.text() == '[{"id":"1","type":"function"}]' and answer.logprobs() is None


def test_stage_answer_copy_is_one_the_client_view_cannot_trim() -> None:
    entry = {"token": "a", "logprob": -0.1, "top_logprobs": [{"token": "a", "logprob": -0.1}] * 5}
    body = {"choices": [{"message": {"content": "a"}, "logprobs": {"content": [entry]}}], "usage": {}}
    answer = StageAnswer.from_reply(body, 0.1, 0.9, NOT_BILLED, copy=True)
    entry["top_logprobs"] = entry["top_logprobs"][:1]  # what cascade.client_body does for top_logprobs=1
    logprobs = answer.logprobs()
    assert logprobs is not None and len(logprobs[0]["top_logprobs"]) == 5


def test_a_drawn_request_keeps_each_scored_answer_with_its_charge_copied_only_for_logprobs() -> None:
    policy = build_policy(POLICY_DOCUMENT)
    entry = {"token": "a", "logprob": -0.1, "top_logprobs": [{"token": "a", "logprob": -0.1}] * 5}
    body = {"choices": [{"message": {"content": "a"}, "logprobs": {"content": [entry]}}], "usage": {}}
    plain = DrawnRequest(
        parse_request(b'{"model": "cascade", "messages": [{"role": "user", "content": "a?"}]}', "chat"),
        policy,
    )
    plain.keep("small", body, 0.2, 0.9, Charge(0.00125, 12, 4))
    kept = plain.answers["small"]
    assert (kept.seconds, kept.score, kept.cost_usd) == (0.2, 0.9, 0.00125)
    assert (kept.prompt_tokens, kept.completion_tokens) == (12, 4)  # the charge's, not the empty usage
    assert kept.choice is body["choices"][0]  # shared: no client view trims it
    raw = b'{"model": "cascade", "messages": [{"role": "user", "content": "a?"}], "logprobs": true, '
    raw += b'"top_logprobs": 1}'
    asking = DrawnRequest(parse_request(raw, "chat"), policy)
    asking.keep("small", body, 0.2, 0.9, Charge(0.00125, 12, 4))
    assert asking.answers["small"].choice == body["choices"][0]
    assert asking.answers["small"].choice is not body["choices"][0]  # private: the client view is trimmed
