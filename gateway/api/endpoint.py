"""The API endpoints as plain ASGI callables (the measured hot path, docs/benchmarks.md).

One ``ApiEndpoint`` per API edge (gateway.api.edges): ``POST /v1/chat/completions`` and
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
import time
from contextlib import aclosing
from functools import partial
from typing import Any

from starlette.types import Receive, Scope, Send

from gateway.api.edges.base import ApiEdge, StreamTranslator, Translated, openai_error_parts
from gateway.api.request_cycle import CONNECTION_LOST, ON_DISCONNECT
from gateway.api.request_log import RequestLog
from gateway.api.request_state import RequestState
from gateway.api.serving import BODY_TIMED_OUT
from gateway.assembly.runtime import Gateway
from gateway.keys.ledger import NANO_PER_USD
from gateway.routing.tier_choice import RoutePlan
from gateway.stages.outcomes import StreamFailed, StreamStart, sse_error
from gateway.streaming.early_start import EarlyStart, decision_comment
from gateway.streaming.sse import SSE_HEADERS
from gateway.wire.answer_reading import READ_FAILURES, unreadable
from gateway.wire.errors import (
    BadRequestError,
    BudgetExceededError,
    GatewayError,
    InternalError,
    ShuttingDownError,
)
from gateway.wire.exchange import ClientGone, Exchange, Headers, client_left, read_body, watch_disconnect
from gateway.wire.facts import CascadeFacts
from gateway.wire.logs import log_event, log_exception
from gateway.wire.requests import ParsedRequest, check_client_schemas
from gateway.wire.trace import DecisionTrace

_JSON_HEADER = (b"content-type", b"application/json")
_SHUTDOWN_MESSAGE = "the gateway is shutting down and this request outlasted its grace; retry it"
_WANTED_HEADERS = frozenset(
    {b"authorization", b"content-length", b"x-cascade-max-cost-usd", b"x-cascade-tier"}
)


# What translating a client body raises when a field has a type no check of the edge foresaw.
_UNREADABLE_REQUEST = (TypeError, ValueError, KeyError, IndexError, AttributeError, RecursionError)


def error_parts(error: GatewayError, request_id: str | None = None) -> tuple[int, Headers, bytes]:
    """The one mapping of a GatewayError to (status, headers, OpenAI error body)."""
    return openai_error_parts(error, request_id)


class ApiEndpoint:
    """ASGI app for ``POST <edge.path>``: one API edge served through the cascade."""

    def __init__(self, gateway: Gateway, edge: ApiEdge[Any]):
        self.gateway = gateway
        self.edge = edge
        self.path = edge.path
        self.wanted_headers = _WANTED_HEADERS | edge.extra_headers
        # Decided once: whether the console keeps each answer sent (gateway.config.console).
        self.keep_answers = gateway.console is not None and gateway.console.keep_bodies
        self.request_log = RequestLog(gateway, edge.name, self.path)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        current = asyncio.current_task()
        assert current is not None
        self.gateway.track(current)  # the shutdown drain waits for (and at last cuts) tracked requests
        try:
            await self._serve(scope, receive, send, current)
        finally:
            self.gateway.untrack(current)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, current: asyncio.Task[Any]) -> None:
        request = RequestState(Exchange(send))
        if self.gateway.tracing is not None:
            request.trace = self.gateway.tracing.request(scope, self.path)
        try:
            await self._handle(request, scope, receive, current)
        except asyncio.CancelledError:
            if not await self._absorb_cancel(request, current):
                raise
        except ClientGone:  # or cut by the body timeout (gateway.api.serving), which answered 408
            request.status, request.outcome = 408 if scope.get(BODY_TIMED_OUT) else 499, "error"
        except GatewayError as error:
            request.status, request.error = error.status, error
            await self._send_error(request.exchange, error, request.request_id, request.translator, request)
        except Exception:
            log_exception("request_failed", request_id=request.request_id, route=self.path)
            request.status = 500
            internal = InternalError(f"internal error (request {request.request_id})")
            await self._send_error(
                request.exchange, internal, request.request_id, request.translator, request
            )
        finally:
            if request.watcher is not None:
                request.watcher.cancel()
            elif scope.get(ON_DISCONNECT) is not None:
                # The hook holds the exchange, which holds uvicorn's cycle and so this scope: a
                # reference cycle the garbage collector would otherwise have to find.
                scope[ON_DISCONNECT] = None
        await self._finish(request)

    async def _handle(
        self, request: RequestState, scope: Scope, receive: Receive, current: asyncio.Task[Any]
    ) -> None:
        """Admit the request, run it through the engine and write its response."""
        gw = self.gateway
        translated = await self._admit(request, scope, receive)
        parsed, plan = translated.request, request.plan
        assert plan is not None
        # From here on upstream calls may run: cancel them if the client goes away (told by the
        # protocol's hook under ``cascade serve``, else by a task waiting on ``receive``).
        if ON_DISCONNECT in scope:
            if scope[ON_DISCONNECT] is CONNECTION_LOST:  # the client left while it was admitted
                raise ClientGone
            scope[ON_DISCONNECT] = partial(client_left, request.exchange, current)
        else:
            request.watcher = asyncio.create_task(watch_disconnect(receive, request.exchange, current))
        deadline = time.monotonic() + gw.limits.request_timeout_s
        # The sampler decides; a drawn request's scored answers are kept by the engine for reuse.
        drawn = request.drawn = gw.learning.draw(plan, parsed) if gw.learning is not None else None
        facts = request.facts = gw.engine.new_facts(plan, drawn.keep if drawn is not None else None)
        if gw.console is not None:  # the console records each call, score and escalation
            facts.trace = DecisionTrace(request.started)
        if parsed.stream:
            request.translator = self.edge.stream_translator(translated.context)
            request.status = await self._stream(request, plan, parsed, facts, deadline)
        else:
            await self._respond(request, translated, plan, facts, deadline)
        request.outcome = facts.outcome

    async def _admit(self, request: RequestState, scope: Scope, receive: Receive) -> Translated[Any]:
        """Read, authenticate, translate and route the request, and reserve its worst case."""
        gw, edge = self.gateway, self.edge
        headers = {k: v for k, v in scope["headers"] if k in self.wanted_headers}
        raw = await read_body(receive, headers.get(b"content-length"), gw.limits.max_body_bytes)
        identity = await gw.shared.authenticator.authenticate(edge.credential(headers), scope)
        request.key_id = identity.key_id
        try:
            translated = edge.translate(raw, request.request_id)
        except _UNREADABLE_REQUEST as exc:
            # The edges check every field they read; a field of a type no check foresaw is still
            # the client's malformed body (400), never the gateway's failure (500). Logged: the
            # edge should name that field.
            log_event("request_unreadable", level=logging.WARNING, path=self.path, error=type(exc).__name__)
            raise BadRequestError("the request body has a field of a type this API does not accept") from exc
        parsed = request.parsed = translated.request
        body = parsed.body
        if "tools" in body or "response_format" in body or "functions" in body:  # carries schemas
            check_client_schemas(body)
        plan = request.plan = gw.planner.plan(
            parsed,
            gw.policy,
            _text(headers.get(b"x-cascade-max-cost-usd")),
            _text(headers.get(b"x-cascade-tier")),
            gw.no_policy_reason(),
        )
        if gw.router_runtime.applies(plan):  # a routed tier: the router picks the route (before reserving)
            # cheap-v1 features: decided inline, no coroutine; an embedding's: awaited.
            routed = gw.router_runtime.apply_inline(plan, parsed)
            plan = request.plan = (
                routed if routed is not None else await gw.router_runtime.apply(plan, parsed)
            )
        if gw.metrics.shift_alarms.alarmed:  # a tier's shift alarm is set: its safe route, if declared
            plan = request.plan = gw.safe_routes.plan(plan)
        request.tier = plan.tier
        try:
            # The prompt bound is the request the engine sends, with all a translation added.
            # Worst-case tokens only for a key with a token limit (gateway.keys.rate_limits), in
            # the same pass over the route.
            tokens = 0
            if identity.rate_limits and any(limit.tokens is not None for limit in identity.rate_limits):
                request.worst_case_usd, tokens = gw.reserve_bounds(plan, parsed, translated.sent_bytes)
            else:
                request.worst_case_usd = gw.reserve_estimate(plan, parsed, translated.sent_bytes)
            request.reservation = await gw.shared.spend.reserve(identity, request.worst_case_usd, tokens)
        except BudgetExceededError:
            gw.metrics.budget_rejections.inc()
            raise
        return translated

    async def _respond(
        self,
        request: RequestState,
        translated: Translated[Any],
        plan: RoutePlan,
        facts: CascadeFacts,
        deadline: float,
    ) -> None:
        """Run the cascade and write its answer as one JSON response with the cascade headers.

        The answer is freed when this returns, before the spend settlement's Redis round trip: the
        parsed upstream bodies of every request waiting on it would cost all requests cache misses.
        """
        parsed = translated.request
        result = await self.gateway.engine.run(plan, parsed, deadline, facts=facts)
        try:  # shaping the answer for the client reads it
            answer, context = result.body, translated.context
            payload = self.edge.render_answer(answer, facts.answered_by, parsed, context)  # type: ignore[arg-type]
        except READ_FAILURES as exc:
            raise unreadable(facts.answered_by, exc) from exc
        overhead_ms = (time.perf_counter() - request.started - facts.upstream_s) * 1000
        out = [
            _JSON_HEADER,
            (b"content-length", str(len(payload)).encode()),
            (b"x-request-id", request.request_id.encode()),
            *facts.headers(overhead_ms),
            *self.gateway.shared.spend.rate_headers(request.reservation),
        ]
        if self.keep_answers:
            request.answer = payload
        await request.exchange.start(200, out)
        await request.exchange.body(payload, more=False)

    async def _absorb_cancel(self, request: RequestState, current: asyncio.Task[Any]) -> bool:
        """Whether a cancellation ends this request (client gone, or cut by the shutdown drain's
        grace: answered 503 then) rather than the server's own task cancellation, which goes on."""
        gw, facts = self.gateway, request.facts
        if request.exchange.gone:
            current.uncancel()
            request.status, request.outcome = 499, "error"
            return True
        if not gw.draining:
            return False
        current.uncancel()  # cut at the end of the shutdown grace
        request.status, request.outcome, request.interrupted = ShuttingDownError.status, "error", True
        # Settle before writing to the client: a slow client must not keep the reservation.
        await gw.shared.spend.settle(request.reservation, facts.cost_usd if facts else 0.0, _tokens(facts))
        error = ShuttingDownError(_SHUTDOWN_MESSAGE)
        await self._send_error(request.exchange, error, request.request_id, request.translator, request)
        return True

    async def _finish(self, request: RequestState) -> None:
        """Settle spend, record metrics and the log line, then offer a sampled request to learning."""
        gw, facts, reservation = self.gateway, request.facts, request.reservation
        if facts is not None and request.outcome == "error" and facts.outcome != "error":
            facts.outcome = "error"
        if reservation is not None:
            await gw.shared.spend.settle(reservation, facts.cost_usd if facts else 0.0, _tokens(facts))
        if request.interrupted:
            gw.metrics.shutdown_interrupted.inc()
            log_event(
                "request_interrupted_by_shutdown",
                level=logging.WARNING,
                request_id=request.request_id,
                path=self.path,
                streamed=request.exchange.started,
                cost_usd=facts.cost_usd if facts else 0.0,
                reserved_usd=reservation.amount_nano / NANO_PER_USD if reservation is not None else None,
            )
        self.request_log.record(request)
        if request.trace is not None:
            request.trace.end(request)
        if gw.console is not None:
            gw.console.record(self.request_log.served(request))
        if request.drawn is not None and request.status == 200 and request.outcome != "error":
            # The response has been sent in full: the sample goes on no client's clock.
            assert gw.learning is not None
            gw.learning.offer(request.request_id, request.drawn, request.tier)

    async def _stream(
        self,
        request: RequestState,
        plan: RoutePlan,
        parsed: ParsedRequest,
        facts: CascadeFacts,
        deadline: float,
    ) -> int:
        """Write the engine's stream events (through the request's translator, if any); the status
        to log (an error's, if the stream failed). A stream whose first event is late starts
        early (gateway.streaming.early_start)."""
        exchange, request_id = request.exchange, request.request_id
        rate = self.gateway.shared.spend.rate_headers(request.reservation)
        early = self._early_start(exchange, request_id, rate)
        try:
            return await self._write_stream(request, plan, parsed, facts, deadline, rate, early)
        finally:
            if early is not None:
                early.close()

    def _early_start(self, exchange: Exchange, request_id: str, rate: Headers) -> EarlyStart | None:
        """The timer that starts a stream whose first event is late (gateway.streaming.early_start)."""
        limits = self.gateway.limits
        if limits.stream_start_after_s is None:
            return None
        known = [*SSE_HEADERS, (b"x-request-id", request_id.encode()), *rate]
        return EarlyStart(
            exchange.start,
            exchange.body,
            lambda: known,
            self.edge.keepalive,
            limits.stream_start_after_s,
            limits.stream_keepalive_s,
        )

    async def _write_stream(
        self,
        request: RequestState,
        plan: RoutePlan,
        parsed: ParsedRequest,
        facts: CascadeFacts,
        deadline: float,
        rate: Headers,
        early: EarlyStart | None,
    ) -> int:
        exchange, request_id, translator = request.exchange, request.request_id, request.translator
        events = self.gateway.engine.stream(plan, parsed, deadline, facts, request.started)
        async with aclosing(events):  # an abandoned stream is charged when its iterator closes
            async for event in events:
                if isinstance(event, StreamStart):
                    if early is not None and await early.stop():  # started: the decision in the body
                        await exchange.body(decision_comment(event.headers))
                    else:
                        await exchange.start(
                            200, [*event.headers, (b"x-request-id", request_id.encode()), *rate]
                        )
                elif isinstance(event, StreamFailed):
                    request.error = event.error
                    data = translator.fail(event.error) if translator is not None else event.data
                    await exchange.body(data, more=False)
                    return event.error.status
                else:
                    if request.first_byte_s is None:
                        request.first_byte_s = time.perf_counter() - request.started
                    if translator is None:
                        await exchange.body(event.data, more=not event.last)
                        continue
                    try:  # the API's events, from the answer's
                        data = translator.translate(event.data)
                    except READ_FAILURES as exc:
                        raise unreadable(facts.answered_by, exc) from exc
                    await exchange.body(data, more=not event.last)
        return 200

    async def _send_error(
        self,
        exchange: Exchange,
        error: GatewayError,
        request_id: str,
        translator: StreamTranslator | None = None,
        request: RequestState | None = None,
    ) -> None:
        """The error in the edge's shape (an SSE error event inside a stream); an admitted request
        of a rate-limited key carries its ``x-ratelimit-*`` headers."""
        if exchange.done:
            return
        if exchange.started:  # inside a stream: the API's error event, never a silent truncation
            data = translator.fail(error) if translator is not None else sse_error(error)
            await exchange.body(data, more=False)
            return
        status, headers, payload = self.edge.error_parts(error, request_id)
        if request is not None and request.reservation is not None:
            headers += self.gateway.shared.spend.rate_headers(request.reservation)
        headers.append((b"content-length", str(len(payload)).encode()))
        await exchange.start(status, headers)
        await exchange.body(payload, more=False)


def _tokens(facts: CascadeFacts | None) -> int | None:
    """Tokens the request's calls used (rate limits settle to it), None when some call's are unknown."""
    if facts is None:
        return 0
    return None if facts.tokens_unknown else facts.tokens


def _text(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value is not None else None
