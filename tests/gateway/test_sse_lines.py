"""How a live stream's bytes become events (gateway.streaming.sse.SseLines): one network read at a
time, the same events wherever the reads split the bytes, a bad event failing after the ones read
before it."""

from __future__ import annotations

import orjson

from gateway.streaming.sse import MAX_LINE_BYTES, SseLines


def _chunk(text: str, finish: str | None = None) -> dict[str, object]:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


EVENTS = [
    _chunk("The"),
    _chunk(" capital"),
    _chunk(" is Paris.", "stop"),
    {"choices": [], "usage": {"total_tokens": 9}},
]


def _stream(newline: bytes = b"\n") -> bytes:
    lines = [b": comment", b"event: message"] + [b"data: " + orjson.dumps(e) for e in EVENTS]
    return b"".join(line + newline + newline for line in [*lines, b"data: [DONE]"]) + b"data: after done\n\n"


def _read(data: bytes, size: int) -> tuple[list[object], SseLines]:
    lines, events = SseLines("small"), []
    for at in range(0, len(data), size):
        events += lines.feed(data[at : at + size])
        if lines.done or lines.failure is not None:
            break
    else:
        events += lines.end()
    return events, lines


def test_the_events_are_the_same_wherever_the_reads_split_the_bytes() -> None:
    for newline in (b"\n", b"\r\n"):
        data = _stream(newline)
        for size in (1, 7, 64, len(data)):
            events, lines = _read(data, size)
            assert events == EVENTS, (newline, size)
            assert lines.done and lines.finished and lines.failure is None


def test_a_bad_event_fails_after_the_events_read_before_it_in_the_same_read() -> None:
    data = (
        b"data: "
        + orjson.dumps(EVENTS[0])
        + b"\n\ndata: {not json\n\ndata: "
        + orjson.dumps(EVENTS[1])
        + b"\n\n"
    )
    lines = SseLines("small")
    assert lines.feed(data) == [EVENTS[0]]  # relayed and counted before the failure is raised
    assert lines.failure is not None and lines.failure.kind == "malformed"


def test_a_line_longer_than_the_limit_fails_before_its_newline_arrives() -> None:
    lines = SseLines("small")
    head = b"data: " + orjson.dumps(EVENTS[0]) + b"\n\n"
    assert lines.feed(head + b'data: {"choices": [], "x": "' + b"x" * (MAX_LINE_BYTES - 100)) == [EVENTS[0]]
    assert lines.failure is None  # not over the limit yet
    assert lines.feed(b"x" * 200) == []
    assert lines.failure is not None and "longer than can be read" in lines.failure.detail


def test_a_last_line_without_its_newline_is_read_at_the_end() -> None:
    lines = SseLines("small")
    assert lines.feed(b"data: " + orjson.dumps(EVENTS[2])) == []
    assert lines.end() == [EVENTS[2]] and lines.finished
