"""Structured JSON-lines logs: one object per line on stderr, via the ``cascade.gateway`` logger.

Per request: request id (also returned as ``x-request-id``), tier, route, score, decision, costs
and latencies. Prompt text only when ``logging.log_prompts`` is on; upstream keys never (the
gateway never puts them in anything it logs).
"""

from __future__ import annotations

import logging
import sys
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


class JsonLinesFormatter(logging.Formatter):
    """Render a record as one JSON object: ``ts``, ``level``, ``event`` plus the record's ``fields``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if fields:
            entry.update(fields)
        if record.exc_info and record.exc_info[0] is not None:
            entry["error_type"] = record.exc_info[0].__name__
            entry["traceback"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def configure_logging(level: str = "info") -> None:
    """Send the project's loggers to stderr as JSON lines (idempotent)."""
    root = logging.getLogger(ROOT_LOGGER_NAME)
    root.setLevel(level.upper())
    if not any(isinstance(h, _StderrHandler) for h in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(JsonLinesFormatter())
        root.addHandler(handler)


def log_event(event: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one structured event (cheap no-op when the level is disabled)."""
    if logger.isEnabledFor(level):
        # makeRecord + handle = Logger.log without findCaller's stack walk (JSON lines carry no
        # file/line anyway): a few microseconds per request on the hot path.
        logger.handle(logger.makeRecord(LOGGER_NAME, level, "", 0, event, (), None, extra={"fields": fields}))


def log_exception(event: str, **fields: Any) -> None:
    """Log an unexpected exception with its traceback (server side only; clients never see it)."""
    logger.error(event, exc_info=True, extra={"fields": fields})
