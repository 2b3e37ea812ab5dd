"""The ``/v1/responses`` edge: the OpenAI Responses API served through the cascade.

Requests become chat completions (gateway.edges.responses_request), answers Response objects
(gateway.edges.responses_shape), chat streams Responses events (gateway.edges.responses_stream).
Nothing is stored (``store`` is always false): docs/apis.md#responses.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from gateway.edges.base import ApiEdge, StreamTranslator, Translated
from gateway.edges.responses_request import ResponsesRequest, translate_responses
from gateway.edges.responses_shape import completion_status, output_items, response_object, response_usage
from gateway.edges.responses_stream import ResponsesStream


class ResponsesEdge(ApiEdge):
    """``POST /v1/responses`` (endpoint label ``responses``)."""

    name = "responses"
    path = "/v1/responses"

    def translate(self, raw: bytes, request_id: str) -> Translated:
        """The chat request for a Responses request (400 naming any field it cannot honour)."""
        parsed, context, sent_bytes = translate_responses(raw, request_id, int(time.time()))
        return Translated(parsed, sent_bytes, context)

    def render(self, body: dict[str, Any], context: ResponsesRequest) -> bytes:
        """The Response object of a complete chat answer."""
        choices = body.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        found = choice.get("message")
        message: dict[str, Any] = found if isinstance(found, dict) else {}
        status, incomplete = completion_status(choice.get("finish_reason"))
        output = output_items(message, choice.get("logprobs"), context, status)
        response = response_object(
            context,
            status=status,
            model=body.get("model") or context.model,
            output=output,
            usage=response_usage(body.get("usage")),
            incomplete_details=incomplete,
        )
        return orjson.dumps(response)

    def stream_translator(self, context: ResponsesRequest) -> StreamTranslator:
        """The Responses event stream of one request."""
        return ResponsesStream(context)
