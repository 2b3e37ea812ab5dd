"""One request's progress through an API endpoint (gateway.api.endpoint): what its settlement,
metrics, log line and console record read."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.api.edges.base import StreamTranslator
from gateway.keys.ledger import Reservation
from gateway.routing.tier_choice import RoutePlan
from gateway.wire.errors import GatewayError
from gateway.wire.exchange import Exchange
from gateway.wire.facts import CascadeFacts
from gateway.wire.requests import ParsedRequest

if TYPE_CHECKING:
    from gateway.learning.answers import DrawnRequest
    from gateway.telemetry.otel_spans import RequestTrace


@dataclass(slots=True)
class RequestState:
    """One request's progress through the endpoint: what its settlement, metrics and log line read."""

    exchange: Exchange
    started: float = field(default_factory=time.perf_counter)
    request_id: str = field(default_factory=lambda: os.urandom(12).hex())
    tier: str = "none"
    outcome: str = "error"
    status: int = 200
    interrupted: bool = False
    facts: CascadeFacts | None = None
    parsed: ParsedRequest | None = None
    plan: RoutePlan | None = None
    reservation: Reservation | None = None
    worst_case_usd: float | None = None
    watcher: asyncio.Task[None] | None = None
    translator: StreamTranslator | None = None
    drawn: DrawnRequest | None = None
    # A stream's first body bytes written, seconds after ``started`` (time to first token).
    first_byte_s: float | None = None
    trace: RequestTrace | None = None  # its SERVER span, when tracing is on (gateway.telemetry.tracing)
    # For the console's record (gateway.records): the caller's key id, the error the client got, the
    # answer sent (only where the console keeps bodies).
    key_id: str | None = None
    error: GatewayError | None = None
    answer: bytes | None = None
