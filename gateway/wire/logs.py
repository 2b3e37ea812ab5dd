"""Structured JSON-lines logs: one object per line on stderr, via the ``cascade.gateway`` logger.

Per request: request id (also returned as ``x-request-id``), tier, route, score, decision, costs
and latencies. Prompt text only when ``logging.log_prompts`` is on; upstream keys never (the
gateway never puts them in anything it logs).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

LOGGER_NAME = "cascade.gateway"
# The handler sits on the "cascade" parent so every project logger (cascade.state, cascade.auth,
# ...) writes the same JSON lines.
ROOT_LOGGER_NAME = "cascade"
logger = logging.getLogger(LOGGER_NAME)


class _StderrHandler(logging.StreamHandler):
    """A StreamHandler writing to whatever ``sys.stderr`` is at emit time (test capture, redirects)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def json_line(created: float, level: str, event: str, fields: dict[str, Any] | None) -> str:
    """One JSON log line: ``ts``, ``level``, ``event``, then ``fields``."""
    entry: dict[str, Any] = {"ts": round(created, 6), "level": level, "event": event}
    if not fields:
        return orjson.dumps(entry, default=str).decode()
    if "ts" in fields or "level" in fields or "event" in fields:  # a field overrides one of those
        entry.update(fields)
        return orjson.dumps(entry, default=str).decode()
    # The same bytes as the three keys and the fields dumped as one object, without copying the
    # fields into it: the two objects joined where the first closes and the second opens.
    return (orjson.dumps(entry, default=str)[:-1] + b"," + orjson.dumps(fields, default=str)[1:]).decode()


class JsonLinesFormatter(logging.Formatter):
    """Render a record as one JSON object: ``ts``, ``level``, ``event`` plus the record's ``fields``."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None)
        if record.exc_info and record.exc_info[0] is not None:
            fields = {
                **(fields or {}),
                "error_type": record.exc_info[0].__name__,
                "traceback": self.formatException(record.exc_info),
            }
        return json_line(record.created, record.levelname.lower(), record.getMessage(), fields)


def configure_logging(level: str = "info") -> None:
    """Send the project's loggers to stderr as JSON lines (idempotent)."""
    root = logging.getLogger(ROOT_LOGGER_NAME)
    root.setLevel(level.upper())
    if not any(isinstance(h, _StderrHandler) for h in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(JsonLinesFormatter())
        root.addHandler(handler)


def _sole_stderr_handler() -> _StderrHandler | None:
    """Our stderr handler if it is the only place a ``cascade.gateway`` record would go, else None."""
    found: _StderrHandler | None = None
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters:
            return None
        for handler in current.handlers:
            if found is not None or not isinstance(handler, _StderrHandler) or handler.filters:
                return None
            found = handler
        if not current.propagate:
            break
        current = current.parent
    return found


def log_event(event: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one structured event (cheap no-op when the level is disabled); as ``log_fields``."""
    log_fields(event, fields, level)


def log_fields(event: str, fields: dict[str, Any], level: int = logging.INFO) -> None:
    """Log one structured event whose fields the caller built as a dict (``log_event`` for a few
    keyword fields; a dict given here is not copied again, and the log record may keep it).

    When the only handler on the way is the JSON-lines stderr handler (a served gateway), the line
    is written directly: the same text the handler would write, without building a LogRecord
    (about half the cost of a request's log line). Any other handler (tests' log capture, a
    library user's own logging) gets the record through the logging machinery as usual.
    """
    if not logger.isEnabledFor(level):
        return
    handler = _sole_stderr_handler()
    if handler is not None and level >= handler.level:
        line = json_line(time.time(), logging.getLevelName(level).lower(), event, fields)
        handler.acquire()
        try:
            stream = sys.stderr
            stream.write(line + "\n")
            stream.flush()
        except Exception:  # as logging.Handler.handleError: a broken stderr never fails a request
            pass
        finally:
            handler.release()
        return
    # makeRecord + handle = Logger.log without findCaller's stack walk (JSON lines carry no
    # file/line anyway).
    logger.handle(logger.makeRecord(LOGGER_NAME, level, "", 0, event, (), None, extra={"fields": fields}))


def log_exception(event: str, **fields: Any) -> None:
    """Log an unexpected exception with its traceback (server side only; clients never see it)."""
    logger.error(event, exc_info=True, extra={"fields": fields})
