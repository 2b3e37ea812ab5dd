"""An upstream call's failure (``UpstreamFailure``): how an error answer or an in-stream error event
becomes one, the wait an error answer asks for, and the client-facing error a failure maps to.

Which failures are retried, and how each attempt is charged, is the client's rule
(gateway.upstream.client).
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from typing import Any

from gateway.upstream.breaker import CircuitOpenError
from gateway.upstream.provider_errors import (
    ProviderError,
    is_content_refusal,
    provider_error_of,
    read_provider_error,
    stated_status,
)
from gateway.wire.errors import (
    GatewayError,
    RateLimitedError,
    UpstreamError,
    UpstreamRejectedError,
    UpstreamTimeoutError,
)
from redaction import Redactor

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
# Client-side faults an upstream reports about the request itself: retried never, escalated as a
# failure at a cheap stage (a content-policy refusal: as ``upstream_errors.content_policy`` says),
# and reported to the client with the upstream's status and error when nothing else can answer.
_REJECTED_STATUS = frozenset({400, 404, 413, 422})


class UpstreamFailure(Exception):
    """One upstream call failed for good (after retries).

    ``kind``: timeout | connect | http | rate_limited | rejected | malformed | circuit_open (the
    model's circuit breaker is open: nothing was sent). ``provider``: what a ``rejected`` call's
    upstream said (gateway.upstream.provider_errors).
    The message never contains the request body, nor any secret: an upstream's own error text is
    passed through the pool's ``Redactor`` before it is kept.
    """

    def __init__(
        self,
        model: str,
        kind: str,
        detail: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        provider: ProviderError | None = None,
    ):
        super().__init__(f"upstream {model!r} {kind}: {detail}")
        self.model = model
        self.kind = kind
        self.detail = detail
        self.status = status
        self.retry_after = retry_after
        self.provider = provider

    @property
    def content_refusal(self) -> bool:
        """The upstream's safety system refused the request (gateway.upstream.provider_errors)."""
        return is_content_refusal(self.provider)

    def to_gateway_error(self) -> GatewayError:
        """The client-facing error when nothing else can answer."""
        if self.kind == "timeout":
            return UpstreamTimeoutError(f"upstream model {self.model!r} timed out")
        if self.kind == "rate_limited":
            headers = {"retry-after": str(max(1, round(self.retry_after)))} if self.retry_after else None
            return RateLimitedError(f"upstream model {self.model!r} is rate limited", headers=headers)
        if self.kind == "circuit_open":
            wait = {"retry-after": str(max(1, round(self.retry_after or 1)))}
            return CircuitOpenError(f"upstream model {self.model!r} is skipped: {self.detail}", headers=wait)
        if self.kind == "rejected" and self.status is not None:
            said = self.provider or ProviderError()
            return UpstreamRejectedError(
                f"upstream model {self.model!r} rejected the request: {self.detail}",
                model=self.model,
                status=self.status,
                type=said.type,
                code=said.code,
                param=said.param,
            )
        return UpstreamError(f"upstream model {self.model!r} failed: {self.detail}")


def status_failure(
    model: str, status: int, payload: bytes, retry_after: str | None, redact: Redactor
) -> UpstreamFailure:
    """The failure of an attempt answered with an error ``status`` (``payload``: its body, whose
    provider error text is kept through ``redact``; ``retry_after``: its ``Retry-After`` header)."""
    detail = f"HTTP {status}"
    if 300 <= status < 400:
        detail += " (a redirect; upstream redirects are never followed)"
    if status == 429:
        return UpstreamFailure(
            model, "rate_limited", detail, status=status, retry_after=_parse_retry_after(retry_after)
        )
    if status in _REJECTED_STATUS:
        said = read_provider_error(payload, redact)
        message = said.message or detail
        return UpstreamFailure(model, "rejected", message, status=status, provider=said)
    return UpstreamFailure(model, "http", detail, status=status, retry_after=_parse_retry_after(retry_after))


def error_event_failure(model: str, event: dict[str, Any], redact: Redactor) -> UpstreamFailure:
    """An upstream's in-stream ``{"error": ...}`` event as a failure: a refusal of the request
    (``rejected``) when it states a refusal's status, or is a content-policy refusal (400: its
    status everywhere else), else an upstream failure (``http``). The provider's words either way."""
    said = provider_error_of(event, redact)
    status = stated_status(event)
    if status is None and is_content_refusal(said):
        status = 400
    if status in _REJECTED_STATUS:
        message = said.message or "upstream sent an error event"
        return UpstreamFailure(model, "rejected", message, status=status, provider=said)
    return UpstreamFailure(model, "http", "upstream sent an error event", provider=said)


def asked_wait(headers: Mapping[str, str]) -> float | None:
    """The wait an error answer asks for, seconds: ``retry-after-ms`` (OpenAI's, more precise),
    else ``Retry-After``; None when neither is present and valid."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            value = float(millis)
        except ValueError:
            value = math.nan
        if value >= 0:
            return value / 1000
    return _parse_retry_after(headers.get("retry-after"))


def _parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP date); None if absent or bad."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
