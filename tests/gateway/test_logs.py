"""The request log line: the direct write of a served gateway is the line the logging handler writes."""

from __future__ import annotations

import json
import logging
from typing import Any

import orjson
import pytest

from gateway.wire import logs

FIELDS: dict[str, Any] = {
    "request_id": "ab" * 12,
    "status": 200,
    "route": ["small", "large"],
    "score": 0.65,
    "threshold": None,
    "escalated": False,
    "odd": object,  # not JSON: written as its str(), as the formatter does
}


@pytest.fixture
def served_logging(monkeypatch: pytest.MonkeyPatch) -> None:
    """The project's handler as the only destination (pytest's capture handlers sit on the root)."""
    logs.configure_logging("info")
    monkeypatch.setattr(logging.getLogger(logs.ROOT_LOGGER_NAME), "propagate", False)


def lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_direct_line_is_the_handlers_line(served_logging: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert logs._sole_stderr_handler() is not None  # the direct path is the one taken
    logs.log_event("request", **FIELDS)
    logs.log_event("slow", level=logging.WARNING, why="w")
    direct = lines(capsys.readouterr().err)

    logs.logger.addFilter(lambda record: True)  # any filter sends records through logging again
    try:
        assert logs._sole_stderr_handler() is None
        logs.log_event("request", **FIELDS)
        logs.log_event("slow", level=logging.WARNING, why="w")
    finally:
        logs.logger.filters.clear()
    through_logging = lines(capsys.readouterr().err)

    assert len(direct) == len(through_logging) == 2
    for fast, slow in zip(direct, through_logging, strict=True):
        assert list(fast) == list(slow)  # same keys in the same order
        assert {k: v for k, v in fast.items() if k != "ts"} == {k: v for k, v in slow.items() if k != "ts"}
        assert abs(fast["ts"] - slow["ts"]) < 5
    assert direct[0]["level"] == "info" and direct[0]["odd"] == str(object)
    assert direct[1] == {**direct[1], "level": "warning", "event": "slow", "why": "w"}


def test_disabled_level_writes_nothing(served_logging: None, capsys: pytest.CaptureFixture[str]) -> None:
    logs.log_event("noise", level=logging.DEBUG, detail=1)
    assert capsys.readouterr().err == ""


def test_another_handler_gets_the_record(caplog: pytest.LogCaptureFixture) -> None:
    logs.configure_logging("info")
    with caplog.at_level(logging.INFO, logger=logs.LOGGER_NAME):
        logs.log_event("request", status=200)
    assert [(r.getMessage(), r.fields) for r in caplog.records] == [("request", {"status": 200})]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "fields",
    [FIELDS, {}, None, {"event": "renamed", "x": 1}, {"ts": 1, "level": "odd"}, {"nested": {"a": [1.5e-7]}}],
)
def test_a_line_is_the_three_keys_and_the_fields_dumped_as_one_object(fields: dict[str, Any] | None) -> None:
    # json_line joins two dumped objects when it can; the bytes are those of one merged object
    # (a field named ts, level or event overrides that key in place, as a dict update does).
    merged = {"ts": round(1796000000.1234567, 6), "level": "info", "event": "request", **(fields or {})}
    expected = orjson.dumps(merged, default=str).decode()
    assert logs.json_line(1796000000.1234567, "info", "request", fields) == expected


def test_log_fields_logs_the_dict_it_is_given(caplog: pytest.LogCaptureFixture) -> None:
    logs.configure_logging("info")
    fields = {"status": 200, "tier": "accept"}
    with caplog.at_level(logging.INFO, logger=logs.LOGGER_NAME):
        logs.log_fields("request", fields)
    assert [(r.getMessage(), r.fields) for r in caplog.records] == [("request", fields)]  # type: ignore[attr-defined]
