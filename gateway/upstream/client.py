"""Upstream OpenAI-compatible clients: one pooled keep-alive aiohttp session per configured model.

aiohttp + orjson because the request path is measured (docs/benchmarks.md): httpx was ~10x slower
as a proxy client on this machine. Every call is bounded by the model's ``timeout_s`` and by the
request deadline. Money (docs/contracts.md#charges): every attempt is reported to the caller
(``money.charges.Attempt``), which charges each one that may have been billed. Retries follow the
model's ``RetryPolicy`` (gateway.upstream.retry: full-jitter backoff, an upstream's
``retry-after-ms``/``Retry-After`` honoured up to a cap, a retry deadline) and only attempts that
provably were not served: a 429 or 5xx answer (an error status carries no completion and no usage;
providers bill none) and a connection that failed before the request was sent. A connection reset
after the request was sent but before a byte of an answer is retried only where the model's
``retry.uncertain`` says so: it is charged its worst case, and such a model's reservation holds a
worst case for every attempt (``ModelConfig.billed_attempts``). A timeout, or any other break after
the request was sent, is charged its worst case and ends the call. Each call's outcome feeds the
model's circuit breaker (gateway.upstream.breaker); an open circuit ends a call before any attempt.
Task cancellation (client gone) propagates into aiohttp, which closes the connection: nothing is
left running, and the attempt in flight is reported as billable.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from multidict import CIMultiDict

from gateway.config.settings import ModelConfig
from gateway.telemetry.metrics import GatewayMetrics
from gateway.telemetry.trace_context import REQUEST_TRACE, STREAM_ATTEMPT, AttemptObserver
from gateway.upstream.breaker import Breaker
from gateway.upstream.breaker_share import SharedBreakers
from gateway.upstream.completion import NOT_A_COMPLETION, completion_of, json_object
from gateway.upstream.failure import RETRYABLE_STATUS, UpstreamFailure, asked_wait, status_failure
from gateway.upstream.retry import retry_delay
from gateway.upstream.transport import SessionOpener, open_pooled_session
from money.charges import Attempt
from redaction import Redactor

_PATHS = {"chat": "/chat/completions", "completions": "/completions"}
# Failures that end an attempt before a byte of its request was sent (no connection was made, or
# its TLS handshake failed): the only connection errors that are provably not served, so the only
# ones retried. Anything else after the request was sent (a timeout, a dropped connection, a body
# cut mid-way) may have been served and billed: it is charged its worst case and never retried,
# so a call costs at most one attempt's worst case and its reservation covers it.
_NEVER_SENT = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
# A connection reset or closed after the request was sent, before any byte of an answer: maybe
# served (a load balancer's reset usually is not), retried only where ``retry.uncertain`` allows.
_RESET = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)


@dataclass(slots=True)
class UpstreamReply:
    """A successful non-streamed upstream answer: parsed body and wall time of the whole call (s)."""

    body: dict[str, Any]
    seconds: float


class UpstreamClient:
    """Calls one configured model's OpenAI-compatible endpoint."""

    def __init__(
        self,
        name: str,
        config: ModelConfig,
        metrics: GatewayMetrics,
        redact: Redactor,
        transport: SessionOpener = open_pooled_session,
        breaker: Breaker | None = None,
        share: SharedBreakers | None = None,
    ):
        """``redact`` cleans an upstream's error text of every secret before it is kept;
        ``transport`` opens the session every request is sent through (gateway.upstream.transport);
        ``breaker`` is the model's circuit breaker (None: none), ``share`` shares it through Redis."""
        self.name = name
        self.breaker = breaker
        self._share = share
        self.uniform = random.uniform  # the backoff's random draw (tests pass their own)
        self.config = config
        self._redact = redact
        self._metrics = metrics
        self._open_session = transport
        self._session: aiohttp.ClientSession | None = None
        # The request headers as aiohttp's own multidict, built once (start() adds the key): aiohttp
        # merges a multidict it is given without first copying it into one, as it does a dict.
        json = "application/json"
        self._headers = CIMultiDict({"content-type": json, "accept": json})
        self._stream_headers = CIMultiDict({"content-type": json, "accept": "text/event-stream"})
        self._urls = {kind: config.base_url + path for kind, path in _PATHS.items()}
        # Bound children (GatewayMetrics.child): an attempt's count and duration without the
        # checks prometheus_client repeats on every update.
        self._requests = {s: metrics.child(metrics.upstream_requests, name, s) for s in _STATUS_LABELS}
        self._duration = metrics.child(metrics.upstream_duration, name)
        # An attempt's bound is the model's timeout_s unless the deadline is nearer: that usual
        # bound built once (aiohttp's frozen ClientTimeout costs a few microseconds to build).
        self._whole_timeout = aiohttp.ClientTimeout(total=config.timeout_s)

    async def start(self) -> None:
        """Open the session (by default pooled: keep-alive connections reused across requests)."""
        key = self.config.api_key()
        if key:
            self._headers["authorization"] = f"Bearer {key}"
            self._stream_headers["authorization"] = f"Bearer {key}"
        self._session = await self._open_session(self.config)

    async def close(self) -> None:
        """Close the session and its connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def redact(self) -> Redactor:
        """The redaction of every upstream text this client keeps (its pool's)."""
        return self._redact

    @property
    def auth_headers(self) -> dict[str, str]:
        """Just the authorization header (if a key is configured), for probes."""
        return {k: v for k, v in self._headers.items() if k == "authorization"}

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError(f"upstream client {self.name!r} is not started")
        return self._session

    async def complete(
        self, kind: str, body: bytes, deadline: float, attempts: list[Attempt]
    ) -> UpstreamReply:
        """POST a non-streamed request; retries within ``deadline`` (a ``time.monotonic()`` instant).

        Every attempt made is appended to ``attempts`` (``money.charges.Attempt``) as it ends,
        whether by an answer, a failure or a cancellation, for the caller to charge them all
        (``money.charges.attempt_charge``). Retries follow the module docstring's rule, so a call
        costs at most ``ModelConfig.billed_attempts`` worst cases of an attempt.
        """
        if self.breaker is None:
            return await self._complete(kind, body, deadline, attempts)
        self._admit(self.breaker)
        try:
            reply = await self._complete(kind, body, deadline, attempts)
        except UpstreamFailure as failure:
            await self._call_ended(self.breaker, failure)
            raise
        except BaseException:
            self.breaker.released()
            raise
        # A success changes what the replicas share only after failures: no await on the usual path.
        if self.breaker.succeeded() and self._share is not None:
            await self._share.succeeded(self.breaker)
        return reply

    def _admit(self, breaker: Breaker) -> None:
        """UpstreamFailure ``circuit_open`` unless the model's circuit lets a call through now."""
        if not breaker.admit():
            wait = breaker.retry_after_s()
            raise UpstreamFailure(self.name, "circuit_open", "circuit open", retry_after=wait)

    async def _call_ended(self, breaker: Breaker, failure: UpstreamFailure | None) -> None:
        """Report a call's outcome to the breaker (and through Redis to the other replicas): a
        refused request is the upstream's answer, a success for the circuit."""
        if failure is None or failure.kind == "rejected":
            if breaker.succeeded() and self._share is not None:
                await self._share.succeeded(breaker)
        elif self._share is not None:
            await self._share.failed(breaker)
        else:
            breaker.failed()

    async def _complete(
        self, kind: str, body: bytes, deadline: float, attempts: list[Attempt]
    ) -> UpstreamReply:
        started = time.monotonic()
        attempt = 0
        while True:
            timeout = self._attempt_timeout(deadline)
            t0 = time.monotonic()
            span = self._attempt_span(kind, body, attempt)  # None unless the request is traced
            status: int | None = None  # the answer's status, once its headers arrived
            try:
                async with self.session.post(
                    self._urls[kind],
                    data=_payload(body),
                    headers=self._headers,
                    timeout=self._client_timeout(timeout),
                    allow_redirects=False,  # a redirect would re-post the prompt elsewhere: a failure
                ) as response:
                    status = response.status
                    payload = await response.read()
                    retry_after = response.headers.get("retry-after")
                    asked = asked_wait(response.headers) if status != 200 else None
            except asyncio.CancelledError:
                attempts.append(Attempt(body, billable=status in (None, 200)))
                if span is not None:
                    span.end("cancelled")
                raise
            except (aiohttp.ClientError, TimeoutError) as exc:
                late = f"no answer within {timeout:.1f}s"
                failure = self._unanswered(exc, body, attempts, t0, status, late, span)
                attempt = await self._backoff_or_raise(failure, attempt, deadline, None, started)
                continue
            if status == 200:
                answer = json_object(payload)
                attempts.append(Attempt(body, answer=answer))
                parsed = completion_of(answer)
                if parsed is None:
                    self._observe("malformed", t0, span, "malformed")
                    raise UpstreamFailure(self.name, "malformed", NOT_A_COMPLETION)
                self._observe("2xx", t0, span, None, parsed)
                return UpstreamReply(parsed, time.monotonic() - started)
            attempts.append(Attempt(body, billable=False))  # an error status: nothing was served
            failure = status_failure(self.name, status, payload, retry_after, self._redact)
            self._observe(_status_label(status), t0, span, str(status))
            if status not in RETRYABLE_STATUS:
                raise failure
            attempt = await self._backoff_or_raise(failure, attempt, deadline, asked, started)

    @asynccontextmanager
    async def stream(
        self, kind: str, body: bytes, deadline: float, attempts: list[Attempt]
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """Open a streamed request (retrying only before the first byte); yields the live response.

        The per-read timeout is the model's ``timeout_s``; the whole stream is bounded by the deadline.
        Every attempt that ended before the 200 is appended to ``attempts`` (as ``complete`` does);
        the 200 one is the caller's to charge by what it reads (gateway.streaming.live).
        """
        breaker = self.breaker
        if breaker is not None:
            self._admit(breaker)
        try:
            response, t0, span = await self._open_stream(kind, body, deadline, attempts)
        except UpstreamFailure as failure:
            if breaker is not None:
                await self._call_ended(breaker, failure)
            raise
        except BaseException:
            if breaker is not None:
                breaker.released()
            raise
        if breaker is not None:
            await self._call_ended(breaker, None)
        status = "error"
        shown = span is not None
        if shown:  # its chunks are shown to it (gateway.streaming.sse)
            STREAM_ATTEMPT.set(span)
        try:
            yield response
            status = "2xx"
        except UpstreamFailure as failure:
            status = _FAILURE_STATUS.get(failure.kind, "error")
            raise
        finally:
            # An unfinished stream (client gone, error) must not go back to the pool half-read.
            if status == "2xx":
                response.release()
            else:
                response.close()
            if shown:  # (set, not reset: an abandoned stream may be closed in another context)
                STREAM_ATTEMPT.set(None)
            self._observe(status, t0, span, None if status == "2xx" else status)

    async def _open_stream(
        self, kind: str, body: bytes, deadline: float, attempts: list[Attempt]
    ) -> tuple[aiohttp.ClientResponse, float, AttemptObserver | None]:
        """Attempts of a streamed request until one answers 200: that response, when it was sent
        and its span (None unless the request is traced)."""
        attempt, first = 0, time.monotonic()
        while True:
            t0 = time.monotonic()
            remaining = deadline - t0
            if remaining <= 0:
                self._observe("timeout", t0)
                raise UpstreamFailure(self.name, "timeout", "request deadline passed")
            timeout = aiohttp.ClientTimeout(
                total=remaining, sock_read=self.config.timeout_s, sock_connect=self.config.timeout_s
            )
            span = self._attempt_span(kind, body, attempt)
            try:
                response = await self.session.post(
                    self._urls[kind],
                    data=_payload(body),
                    headers=self._stream_headers,
                    timeout=timeout,
                    allow_redirects=False,
                )
            except asyncio.CancelledError:
                attempts.append(Attempt(body))  # sent, maybe served, and no answer seen
                if span is not None:
                    span.end("cancelled")
                raise
            except (aiohttp.ClientError, TimeoutError) as exc:
                failure = self._unanswered(exc, body, attempts, t0, None, "no answer in time", span)
                attempt = await self._backoff_or_raise(failure, attempt, deadline, None, first)
                continue
            if response.status == 200:
                return response, t0, span
            failure, asked = await self._refused(response, body, attempts, t0, span)
            attempt = await self._backoff_or_raise(failure, attempt, deadline, asked, first)

    def _unanswered(
        self,
        exc: BaseException,
        body: bytes,
        attempts: list[Attempt],
        started: float,
        status: int | None,
        late: str,
        span: AttemptObserver | None = None,
    ) -> UpstreamFailure:
        """An attempt ended by ``exc`` before its answer was read (``status``: the answer's, when its
        headers came): its failure, returned when it may be retried (never sent; or reset before any
        answer byte where ``retry.uncertain``), else raised (``late`` tells a timeout's). Charged as
        the module docstring says."""
        if isinstance(exc, _NEVER_SENT):
            attempts.append(Attempt(body, billable=False))
            self._observe("error", started, span, type(exc).__name__)
            return UpstreamFailure(self.name, "connect", type(exc).__name__)
        # Sent, then it timed out, the connection dropped or the body was cut: maybe billed.
        attempts.append(Attempt(body, billable=status in (None, 200)))
        if isinstance(exc, TimeoutError):
            self._observe("timeout", started, span, "timeout")
            raise UpstreamFailure(self.name, "timeout", late) from None
        self._observe("error", started, span, type(exc).__name__)
        failure = UpstreamFailure(self.name, "connect", _broken(exc, status))
        if status is None and isinstance(exc, _RESET) and self.config.retry.uncertain:
            return failure  # charged its worst case above; the reservation holds one per attempt
        raise failure from None

    async def _refused(
        self,
        response: aiohttp.ClientResponse,
        body: bytes,
        attempts: list[Attempt],
        started: float,
        span: AttemptObserver | None = None,
    ) -> tuple[UpstreamFailure, float | None]:
        """A stream answered with an error status (nothing served): its failure and the wait it
        asks for when the status is retryable, else the failure raised."""
        attempts.append(Attempt(body, billable=False))
        try:
            payload = await response.read()
        except (aiohttp.ClientError, TimeoutError):
            payload = b""
        finally:
            response.release()
        failure = status_failure(
            self.name, response.status, payload, response.headers.get("retry-after"), self._redact
        )
        self._observe(_status_label(response.status), started, span, str(response.status))
        if response.status not in RETRYABLE_STATUS:
            raise failure
        return failure, asked_wait(response.headers)

    def _client_timeout(self, total: float) -> aiohttp.ClientTimeout:
        """aiohttp's bound of an attempt of at most ``total`` seconds (the model's, built once)."""
        if total == self._whole_timeout.total:
            return self._whole_timeout
        return aiohttp.ClientTimeout(total=total)

    def _attempt_timeout(self, deadline: float) -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise UpstreamFailure(self.name, "timeout", "request deadline passed")
        return min(self.config.timeout_s, remaining)

    async def _backoff_or_raise(
        self, failure: UpstreamFailure, attempt: int, deadline: float, asked: float | None, first: float
    ) -> int:
        """Sleep before the next attempt (gateway.upstream.retry), or raise ``failure`` when the
        policy allows no retry now (out of retries, of time, or asked to wait past its cap);
        ``first`` is when the call's first attempt started."""
        config = self.config
        delay = retry_delay(
            config.retry,
            config.max_retries - attempt,
            attempt,
            asked,
            first,
            deadline,
            now=time.monotonic(),
            uniform=self.uniform,
        )
        if delay is None:
            raise failure
        await asyncio.sleep(delay)
        return attempt + 1

    def _attempt_span(self, kind: str, body: bytes, attempt: int) -> AttemptObserver | None:
        """The CLIENT span of an attempt of a traced request (gateway.telemetry.tracing), else None."""
        traced = REQUEST_TRACE.get()
        return traced.attempt(self.name, self.config, kind, body, attempt) if traced is not None else None

    def _observe(
        self,
        status: str,
        started: float,
        span: AttemptObserver | None = None,
        error_type: str | None = None,
        answer: dict[str, Any] | None = None,
    ) -> None:
        """Count an ended attempt (and end its span, if traced: ``error_type`` unless answered)."""
        self._requests[status].inc()
        self._duration.observe(time.monotonic() - started)
        if span is not None:
            span.end(error_type, answer)


def _payload(body: bytes) -> aiohttp.BytesPayload:
    """The body of one attempt as the payload aiohttp would make of the bytes (a payload is sent
    once): given it, aiohttp skips looking up which payload type bytes make."""
    return aiohttp.BytesPayload(body)


def _broken(exc: BaseException, status: int | None) -> str:
    """What ended an attempt after its request was sent (a dropped connection, a cut body)."""
    where = "before an answer" if status is None else f"in the body of an HTTP {status} answer"
    return f"connection broke {where} ({type(exc).__name__})"


_STATUS_LABELS = ("2xx", "4xx", "429", "5xx", "timeout", "error", "malformed")
# How a stream that failed after its 200 is counted in cascade_upstream_requests_total{status}.
_FAILURE_STATUS = {"timeout": "timeout", "malformed": "malformed"}


def _status_label(status: int) -> str:
    if status == 429:
        return "429"
    if 200 <= status < 300:
        return "2xx"
    if status < 400:
        return "error"  # a redirect (never followed) or another non-final answer
    return "5xx" if status >= 500 else "4xx"
