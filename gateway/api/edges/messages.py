"""The Anthropic Messages edge: ``POST /v1/messages`` through the cascade (docs/apis.md#v1messages).

The request is translated to a chat body (gateway.api.edges.messages_request, its content blocks
gateway.api.edges.messages_content), the cascade runs it like any chat request (same tiers, keys, spend
reservation of the bytes it sends, headers, metrics labelled ``endpoint="messages"``, logs and
learning samples), and the answer comes back as an Anthropic ``message``
(gateway.api.edges.messages_response) or Anthropic's SSE events (gateway.api.edges.messages_stream): the
same rooms as the Responses edge's. The key is read from ``x-api-key`` (what the anthropic SDK and
Claude Code send) or ``Authorization: Bearer``; ``anthropic-version`` and ``anthropic-beta`` are
accepted whatever their value (the translated surface is the same for every version).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gateway.api.edges.base import JSON_HEADER, ApiEdge, Translated, translated
from gateway.api.edges.messages_request import MessagesRequest, translate_request
from gateway.api.edges.messages_response import error_body, render_message
from gateway.api.edges.messages_stream import PING, MessagesStreamTranslator
from gateway.wire.errors import AuthenticationError, BudgetExceededError, GatewayError
from gateway.wire.exchange import Headers
from gateway.wire.requests import ParsedRequest

COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
COUNT_TOKENS_REFUSAL = (
    "/v1/messages/count_tokens is not served: the cascade's models do not share a tokenizer and the "
    "gateway does not guess counts; every answer's usage reports the tokens it was charged for"
)


class MessagesEdge(ApiEdge[MessagesRequest]):
    """``POST /v1/messages``: Anthropic Messages in, Anthropic Messages out."""

    name = "messages"
    path = "/v1/messages"
    extra_headers = frozenset({b"x-api-key"})
    keepalive = PING  # Anthropic's own keep-alive event, which its SDKs skip

    def credential(self, headers: Mapping[bytes, bytes]) -> str | None:
        """``x-api-key: <key>`` (as ``Bearer <key>``), else the ``Authorization`` header."""
        key = headers.get(b"x-api-key")
        if key is not None and key.strip():
            return "Bearer " + key.decode("latin-1").strip()
        return super().credential(headers)

    def translate(self, raw: bytes, request_id: str) -> Translated[MessagesRequest]:
        """The chat request the cascade runs; ``sent_bytes`` is its JSON's size."""
        return translated(translate_request(raw))

    def render(self, body: dict[str, Any], context: MessagesRequest) -> bytes:
        """The answer as an Anthropic ``message`` (``model`` is the configured model that answered)."""
        return orjson.dumps(render_message(body, str(body.get("model") or ""), context.stop_sequences))

    def render_answer(
        self, answer: dict[str, Any], model_name: str, request: ParsedRequest, context: MessagesRequest
    ) -> bytes:
        """The ``message`` of the upstream's answer. Without logprobs asked it is rendered from the
        answer as it is: the client view (``client_body``) would only drop logprobs the message
        never reads, and name ``model_name``, given here (a copy saved)."""
        if context.wants_logprobs:  # the client view trims the alternatives in place
            return super().render_answer(answer, model_name, request, context)
        return orjson.dumps(render_message(answer, model_name or "", context.stop_sequences))

    def stream_translator(self, context: MessagesRequest) -> MessagesStreamTranslator:
        """Anthropic's SSE events for one streamed request."""
        return MessagesStreamTranslator(context.stop_sequences)

    def error_parts(self, error: GatewayError, request_id: str | None = None) -> tuple[int, Headers, bytes]:
        """The error in Anthropic's shape (``{"type": "error", "error": {"type", "message"}}``)."""
        if isinstance(error, AuthenticationError) and error.code == "missing_api_key":
            error = AuthenticationError(
                "Missing API key: send it as 'x-api-key: <key>' or 'Authorization: Bearer <key>'.",
                code="missing_api_key",
            )
        headers: Headers = [JSON_HEADER]
        headers.extend((k.lower().encode(), v.encode()) for k, v in error.headers.items())
        if isinstance(error, BudgetExceededError | AuthenticationError):
            # Anthropic clients retry these unless told not to: the SDK sleeps out a 429's
            # Retry-After (a spent budget's is the rest of its window), Claude Code retries a 401
            # ten times over minutes. Neither a wrong key nor a spent budget heals in the meantime.
            headers.append((b"x-should-retry", b"false"))
        if request_id:
            headers.append((b"request-id", request_id.encode()))
            headers.append((b"x-request-id", request_id.encode()))
        return error.status, headers, orjson.dumps(error_body(error, request_id))
