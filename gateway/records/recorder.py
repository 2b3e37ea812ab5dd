"""What the endpoint calls once a request is settled, when the console is enabled.

``RequestRecorder.record`` builds the request's decision record (gateway.records.record) and hands it
to the store, which never makes the request wait (gateway.records.store). With the console off there
is no recorder: the endpoint's ``gateway.console is None`` is the whole cost.
"""

from __future__ import annotations

import logging

import orjson
from redis.asyncio import Redis

from gateway.config.console import ConsoleConfig
from gateway.records.record import BodyPolicy, ServedRequest, decision_record
from gateway.records.store import RecordStore, RingStore
from gateway.records.stream_store import StreamStore
from gateway.redis.batch import RedisBatcher
from gateway.redis.keys import RedisKeys
from gateway.wire.trace import RequestTrace
from redaction import Redactor

log = logging.getLogger("cascade.console")


class RequestRecorder:
    """Builds each request's record and writes it to ``store``."""

    def __init__(self, store: RecordStore, config: ConsoleConfig, redact: Redactor):
        self.store = store
        self.config = config
        self.keep_bodies = config.record_bodies
        self._bodies = BodyPolicy(config.record_bodies, config.body_chars, redact)

    @staticmethod
    def trace(started: float) -> RequestTrace:
        """A new trace for the engine to fill (``CascadeFacts.trace``)."""
        return RequestTrace(started)

    def record(self, served: ServedRequest) -> None:
        """Build and store ``served``'s record; a failure to build one is logged, never raised."""
        try:
            record = decision_record(served, self._bodies)
            data = orjson.dumps(record)
        except Exception:  # a record must never fail the request it describes
            log.exception("console record not built (request %s)", served.request_id)
            return
        self.store.write(served.request_id, record, data)


def build_recorder(
    config: ConsoleConfig,
    redact: Redactor,
    batcher: RedisBatcher | None,
    reader: Redis | None,
    keys: RedisKeys,
) -> RequestRecorder | None:
    """The recorder of ``config`` (None when the console is off): records in the capped Redis stream
    when the gateway has Redis (``batcher`` for writes, ``reader`` for the pages), else in a ring."""
    if not config.enabled:
        return None
    store: RecordStore
    if batcher is not None and reader is not None:
        store = StreamStore(batcher, reader, keys, config.max_records)
    else:
        store = RingStore(config.max_records)
    return RequestRecorder(store, config, redact)
