"""The gateway's one error hierarchy, mapped once to OpenAI-shaped JSON error bodies.

Every failure a client can see is a ``GatewayError`` subclass; the app installs one exception
handler that renders ``{"error": {"message", "type", "param", "code"}}`` with ``status``. An error
an upstream answered (``UpstreamRejectedError``) carries the upstream's own ``type``, ``code`` and
``param`` and says so in an ``upstream`` object; every other error is the gateway's own.
"""

from __future__ import annotations

from typing import Any


class GatewayError(Exception):
    """Base class: an error with an HTTP status and an OpenAI error ``type``/``code``."""

    status: int = 500
    type: str = "server_error"
    code: str | None = None
    # Set only on an error an upstream answered: ``{"model", "status", "type", "code", "param"}``.
    upstream: dict[str, Any] | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The OpenAI error body (with the ``upstream`` object of an upstream's error)."""
        error: dict[str, Any] = {
            "message": self.message,
            "type": self.type,
            "param": self.param,
            "code": self.code,
        }
        if self.upstream is not None:
            error["upstream"] = self.upstream
        return {"error": error}


class BadRequestError(GatewayError):
    """400: malformed JSON, wrong types, missing fields, unknown tier, bad header values."""

    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class UnsupportedInputError(BadRequestError):
    """400: a content part the gateway cannot price (a type it has no declared bound for, on every
    API, or a kind the route's models declare no bound for): refused before any call, never
    forwarded unpriced (docs/contracts.md#content-parts)."""

    code = "unsupported_input"


class UnknownTierRequestError(BadRequestError):
    """400: the request named a tier the current policy does not define."""

    code = "unknown_tier"


class AuthenticationError(GatewayError):
    """401: missing or unknown client API key (or admin key on admin endpoints)."""

    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class ModelNotFoundError(GatewayError):
    """404: ``model`` is neither a cascade alias nor a configured model."""

    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class NotServedError(GatewayError):
    """404: an endpoint of a client API that the gateway deliberately does not serve (it says why)."""

    status = 404
    type = "invalid_request_error"
    code = "not_served"


class BodyTooLargeError(GatewayError):
    """413: request body over ``limits.max_body_bytes``."""

    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class BudgetExceededError(GatewayError):
    """429: the client key's spend limit for the current window is exhausted."""

    status = 429
    type = "insufficient_quota"
    code = "budget_exceeded"


class SpendUnavailableError(GatewayError):
    """503: spend limits cannot be checked (Redis down) and the config says to refuse meanwhile."""

    status = 503
    type = "server_error"
    code = "spend_unavailable"


class RateLimitedError(GatewayError):
    """429: rate limited (including an upstream 429 that outlasted the request deadline)."""

    status = 429
    type = "rate_limit_error"
    code = "rate_limited"


class RateLimitExceededError(GatewayError):
    """429: the client key's request or token rate limit for the current window is reached.

    Shaped as OpenAI's own rate-limit error: ``type`` is the limit reached (``requests`` or
    ``tokens``), ``code`` ``rate_limit_exceeded``.
    """

    status = 429
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, limit_kind: str, headers: dict[str, str] | None = None):
        super().__init__(message, headers=headers)
        self.type = limit_kind


class AuthUnavailableError(GatewayError):
    """503: a key could not be checked because Redis is unreachable and the key is not cached."""

    status = 503
    type = "server_error"
    code = "auth_unavailable"


class UpstreamError(GatewayError):
    """502: an upstream failed (5xx, refused, malformed JSON) and nothing could be served."""

    status = 502
    type = "upstream_error"
    code = "upstream_failed"


class UpstreamRejectedError(GatewayError):
    """An upstream refused the request itself (400, 404, 413, 422) and nothing else answered: its
    status, and its own ``type``, ``code`` and ``param`` (``None`` where it gave none: never a code
    of the gateway's), with the ``upstream`` object naming the model that answered it
    (docs/contracts.md#upstream-errors)."""

    type = "invalid_request_error"

    def __init__(
        self,
        message: str,
        *,
        model: str,
        status: int,
        type: str | None,
        code: str | None,
        param: str | None,
    ):
        super().__init__(message, param=param, headers={"x-cascade-error-source": "upstream"})
        self.status = status
        self.code = code
        if type is not None:
            self.type = type
        self.upstream = {"model": model, "status": status, "type": type, "code": code, "param": param}


class UpstreamTimeoutError(GatewayError):
    """504: an upstream did not answer within its timeout / the request deadline."""

    status = 504
    type = "upstream_error"
    code = "upstream_timeout"


class PolicyUnavailableError(GatewayError):
    """503: no valid policy loaded yet, or the policy cannot be served (e.g. scorer ``external``)."""

    status = 503
    type = "server_error"
    code = "policy_unavailable"


class PolicyReloadFailedError(GatewayError):
    """422 (admin reload): the policy source holds an invalid policy; the last good one is still served."""

    status = 422
    type = "invalid_request_error"
    code = "policy_invalid"


class PolicySourceDownError(GatewayError):
    """503 (admin reload): the policy source (Redis) cannot be read; the last good policy is still served."""

    status = 503
    type = "server_error"
    code = "policy_source_unavailable"


class InternalError(GatewayError):
    """500: an unexpected failure inside the gateway (details only in the server log)."""

    code = "internal_error"


class ShuttingDownError(GatewayError):
    """503: the gateway is shutting down and its grace for in-flight requests is over."""

    status = 503
    type = "server_error"
    code = "server_shutting_down"


class UnreadableAnswerError(UpstreamError):
    """502: an upstream answered (and its call was charged) but the gateway cannot read the answer:
    nested deeper than its parsers go, a field of the wrong type, a chunk too large, ...
    (``gateway.wire.answer_reading``)."""

    code = "upstream_unreadable"


class AuthThrottledError(GatewayError):
    """429: too many requests from this address were refused for their key
    (``gateway.keys.auth_throttle``)."""

    status = 429
    type = "rate_limit_error"
    code = "too_many_auth_failures"
