"""The API endpoints as plain ASGI callables (the measured hot path, docs/benchmarks.md).

One ``ApiEndpoint`` per API edge (gateway.edges): ``POST /v1/chat/completions`` and
``POST /v1/completions`` (the identity edge) and the translated APIs. Read the body under the size
limit, authenticate, let the edge parse and translate it (orjson, validated by hand), choose the
route, reserve spend for the request the engine will send, run the cascade (or write the events of
``CascadeEngine.stream``, through the edge's stream translator if it has one), answer with the
``x-cascade-*`` headers, settle spend, then record metrics and one JSON log line, labelled with the
edge's name; a request drawn for learning is handed to the sampler last, after its response was sent
(gateway.learning). Every cascade rule lives in the engine; this module only reads requests and
writes bytes. Every failure a client sees goes through the edge's ``error_parts`` (one mapping of
GatewayError to the API's error body); an unexpected exception is a 500 error body without
traceback, logged. A client disconnect cancels the request's task and with
it every upstream call. At shutdown, a request still open when the drain's grace ends is cancelled
too, and ends with a 503 ``server_shutting_down`` (an SSE error event inside a stream), settled,
logged and counted.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from starlette.types import Receive, Scope, Send

from gateway.auth import client_address
from gateway.cascade import client_body
from gateway.edges.base import ApiEdge, Headers, StreamTranslator, openai_error_parts
from gateway.errors import (
    BodyTooLargeError,
    BudgetExceededError,
    GatewayError,
    InternalError,
    ShuttingDownError,
)
from gateway.facts import CascadeFacts
from gateway.live import StreamFailed, StreamStart
from gateway.logs import log_event, log_exception
from gateway.requests import ParsedRequest
from gateway.routing import RoutePlan
from gateway.runtime import Gateway
from gateway.serving import BODY_TIMED_OUT
from gateway.spend import NANO_PER_USD
from gateway.streaming import sse_error

if TYPE_CHECKING:
    from gateway.learning.answers import DrawnRequest

_JSON_HEADER = (b"content-type", b"application/json")
_SHUTDOWN_MESSAGE = "the gateway is shutting down and this request outlasted its grace; retry it"
_WANTED_HEADERS = frozenset(
    {b"authorization", b"content-length", b"x-cascade-max-cost-usd", b"x-cascade-tier"}
)


class _ClientGone(Exception):
    """The client disconnected before its request body arrived."""


def error_parts(error: GatewayError, request_id: str | None = None) -> tuple[int, Headers, bytes]:
    """The one mapping of a GatewayError to (status, headers, OpenAI error body)."""
    return openai_error_parts(error, request_id)


class _Exchange:
    """One HTTP exchange's send side, remembering whether the response has started."""

    __slots__ = ("done", "gone", "send", "started")

    def __init__(self, send: Send):
        self.send = send
        self.started = False
        self.done = False
        self.gone = False

    async def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.started = True
        await self.send({"type": "http.response.start", "status": status, "headers": headers})

    async def body(self, data: bytes, more: bool = True) -> None:
        if not more:
            self.done = True  # from here on a disconnect is the normal end of the exchange
        await self.send({"type": "http.response.body", "body": data, "more_body": more})


class ApiEndpoint:
    """ASGI app for ``POST <edge.path>``: one API edge served through the cascade."""

    def __init__(self, gateway: Gateway, edge: ApiEdge):
        self.gateway = gateway
        self.edge = edge
        self.path = edge.path
        self.wanted_headers = _WANTED_HEADERS | edge.extra_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        current = asyncio.current_task()
        assert current is not None
        self.gateway.track(current)  # the shutdown drain waits for (and at last cuts) tracked requests
        try:
            await self._serve(scope, receive, send, current)
        finally:
            self.gateway.untrack(current)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, current: asyncio.Task[Any]) -> None:
        gw = self.gateway
        started = time.perf_counter()
        request_id = os.urandom(12).hex()
        exchange = _Exchange(send)
        edge = self.edge
        headers = {k: v for k, v in scope["headers"] if k in self.wanted_headers}
        tier, outcome, status = "none", "error", 200
        interrupted = False
        facts: CascadeFacts | None = None
        parsed: ParsedRequest | None = None
        plan: RoutePlan | None = None
        drawn: DrawnRequest | None = None
        reservation = None
        worst_case_usd: float | None = None
        watcher: asyncio.Task[None] | None = None
        translator: StreamTranslator | None = None
        try:
            raw = await _read_body(receive, headers.get(b"content-length"), gw.limits.max_body_bytes)
            identity = await gw.shared.authenticator.authenticate(
                edge.credential(headers), client_address(scope)
            )
            translated = edge.translate(raw, request_id)
            parsed = translated.request
            plan = gw.router.plan(
                parsed,
                gw.policy,
                _text(headers.get(b"x-cascade-max-cost-usd")),
                _text(headers.get(b"x-cascade-tier")),
                gw.no_policy_reason(),
            )
            tier = plan.tier
            try:
                # The prompt bound is the request the engine sends, with all a translation added.
                worst_case_usd = gw.reserve_estimate(plan, parsed, translated.sent_bytes)
                reservation = await gw.shared.spend.reserve(identity, worst_case_usd)
            except BudgetExceededError:
                gw.metrics.budget_rejections.inc()
                raise
            # From here on upstream calls may run: cancel them if the client goes away.
            watcher = asyncio.create_task(_watch_disconnect(receive, exchange, current))
            deadline = time.monotonic() + gw.limits.request_timeout_s
            drawn = gw.learning.draw(plan, parsed) if gw.learning is not None else None
            facts = gw.engine.new_facts(plan, drawn.keep if drawn is not None else None)
            if parsed.stream:
                translator = edge.stream_translator(translated.context)
                status = await self._stream(
                    exchange, plan, parsed, facts, deadline, request_id, started, translator
                )
            else:
                result = await gw.engine.run(plan, parsed, deadline, facts=facts)
                body = client_body(result.body, facts.answered_by, parsed)  # type: ignore[arg-type]
                payload = edge.render(body, translated.context)
                overhead_ms = (time.perf_counter() - started - facts.upstream_s) * 1000
                out = [
                    _JSON_HEADER,
                    (b"content-length", str(len(payload)).encode()),
                    (b"x-request-id", request_id.encode()),
                    *facts.headers(overhead_ms),
                ]
                await exchange.start(200, out)
                await exchange.body(payload, more=False)
                # Free the answer now, not after the spend settlement's Redis round trip: the parsed
                # upstream bodies of every request waiting on it cost all requests cache misses.
                del result, body, payload
            outcome = facts.outcome
        except asyncio.CancelledError:
            if exchange.gone:
                current.uncancel()
                status, outcome = 499, "error"
            elif gw.draining:  # cut at the end of the shutdown grace
                current.uncancel()
                status, outcome, interrupted = ShuttingDownError.status, "error", True
                # Settle before writing to the client: a slow client must not keep the reservation.
                await gw.shared.spend.settle(reservation, facts.cost_usd if facts else 0.0)
                await self._send_error(exchange, ShuttingDownError(_SHUTDOWN_MESSAGE), request_id, translator)
            else:
                raise
        except _ClientGone:  # or cut by the body timeout (gateway.serving), which answered 408
            status, outcome = 408 if scope.get(BODY_TIMED_OUT) else 499, "error"
        except GatewayError as error:
            status = error.status
            await self._send_error(exchange, error, request_id, translator)
        except Exception:
            log_exception("request_failed", request_id=request_id, route=self.path)
            status = 500
            await self._send_error(
                exchange, InternalError(f"internal error (request {request_id})"), request_id, translator
            )
        finally:
            if watcher is not None:
                watcher.cancel()
        if facts is not None and outcome == "error" and facts.outcome != "error":
            facts.outcome = "error"
        if reservation is not None:
            await gw.shared.spend.settle(reservation, facts.cost_usd if facts else 0.0)
        if interrupted:
            gw.metrics.shutdown_interrupted.inc()
            log_event(
                "request_interrupted_by_shutdown",
                level=logging.WARNING,
                request_id=request_id,
                path=self.path,
                streamed=exchange.started,
                cost_usd=facts.cost_usd if facts else 0.0,
                reserved_usd=reservation.amount_nano / NANO_PER_USD if reservation is not None else None,
            )
        self._record(request_id, tier, outcome, status, facts, parsed, started, worst_case_usd)
        if drawn is not None and status == 200 and outcome != "error":
            # The response has been sent in full: the sample goes on no client's clock.
            assert gw.learning is not None
            gw.learning.offer(request_id, drawn, tier)

    async def _stream(
        self,
        exchange: _Exchange,
        plan: RoutePlan,
        parsed: ParsedRequest,
        facts: CascadeFacts,
        deadline: float,
        request_id: str,
        started: float,
        translator: StreamTranslator | None,
    ) -> int:
        """Write the engine's stream events (through ``translator``, if any); the status to log
        (an error's, if the stream failed)."""
        events = self.gateway.engine.stream(plan, parsed, deadline, facts, started)
        async with aclosing(events):  # an abandoned stream is charged when its iterator closes
            async for event in events:
                if isinstance(event, StreamStart):
                    await exchange.start(200, [*event.headers, (b"x-request-id", request_id.encode())])
                elif isinstance(event, StreamFailed):
                    data = translator.fail(event.error) if translator is not None else event.data
                    await exchange.body(data, more=False)
                    return event.error.status
                elif translator is not None:
                    await exchange.body(translator.translate(event.data), more=not event.last)
                else:
                    await exchange.body(event.data, more=not event.last)
        return 200

    async def _send_error(
        self,
        exchange: _Exchange,
        error: GatewayError,
        request_id: str,
        translator: StreamTranslator | None = None,
    ) -> None:
        if exchange.done:
            return
        if exchange.started:  # inside a stream: the API's error event, never a silent truncation
            data = translator.fail(error) if translator is not None else sse_error(error)
            await exchange.body(data, more=False)
            return
        status, headers, payload = self.edge.error_parts(error, request_id)
        headers.append((b"content-length", str(len(payload)).encode()))
        await exchange.start(status, headers)
        await exchange.body(payload, more=False)

    def _record(
        self,
        request_id: str,
        tier: str,
        outcome: str,
        status: int,
        facts: CascadeFacts | None,
        parsed: ParsedRequest | None,
        started: float,
        worst_case_usd: float | None,
    ) -> None:
        """Metrics and the request's log line (with the worst case reserved against, once known)."""
        metrics = self.gateway.metrics
        duration = time.perf_counter() - started
        upstream_s = facts.upstream_s if facts else 0.0
        endpoint = self.edge.name
        metrics.child(metrics.requests, tier, outcome, endpoint).inc()
        metrics.child(metrics.request_duration, tier, endpoint).observe(duration)
        metrics.child(metrics.overhead, endpoint).observe(max(0.0, duration - upstream_s))
        fields: dict[str, Any] = {
            "request_id": request_id,
            "endpoint": endpoint,
            "path": self.path,
            "status": status,
            "tier": tier,
            "outcome": outcome,
            "duration_ms": round(duration * 1000, 3),
            "overhead_ms": round((duration - upstream_s) * 1000, 3),
        }
        if parsed is not None:
            fields["model"] = parsed.model[:100]
            fields["stream"] = parsed.stream
            if self.gateway.logs.log_prompts:
                fields["prompt"] = parsed.body.get("messages" if parsed.kind == "chat" else "prompt")
        if facts is not None:
            fields.update(
                route=facts.route,
                models_called=facts.models_called,
                answered_by=facts.answered_by,
                escalated=facts.escalated,
                score=facts.score,
                threshold=facts.threshold,
                cost_usd=facts.cost_usd,
                worst_case_usd=worst_case_usd,
                upstream_ms=round(upstream_s * 1000, 3),
                degraded=facts.degraded,
                policy_id=facts.policy_id,
            )
            if facts.failures:
                fields["upstream_failures"] = facts.failures
        log_event("request", **fields)


async def _read_body(receive: Receive, content_length: bytes | None, limit: int) -> bytes:
    """The request body, refusing more than ``limit`` bytes (413) before or while reading."""
    if content_length is not None:
        try:
            declared = int(content_length)
        except ValueError:
            declared = 0
        if declared > limit:
            raise BodyTooLargeError(f"request body of {declared} bytes exceeds the limit of {limit} bytes")
    message = await receive()
    if message["type"] == "http.disconnect":
        raise _ClientGone
    body: bytes = message.get("body", b"")
    if not message.get("more_body"):
        if len(body) > limit:
            raise BodyTooLargeError(f"request body exceeds the limit of {limit} bytes")
        return body
    chunks, size = [body], len(body)
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _watch_disconnect(receive: Receive, exchange: _Exchange, task: asyncio.Task[Any]) -> None:
    """Cancel the request's task (and with it every upstream call) when the client disconnects."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            if not exchange.done:
                exchange.gone = True
                task.cancel()
            return


def _text(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value is not None else None
