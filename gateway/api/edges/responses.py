"""The ``/v1/responses`` edge: the OpenAI Responses API served through the cascade.

Requests become chat completions (gateway.api.edges.responses_request, its ``input`` items
gateway.api.edges.responses_content), answers Response objects (gateway.api.edges.responses_response), chat
streams Responses events (gateway.api.edges.responses_stream): the same rooms as the Messages edge's.
Nothing is stored (``store`` is always false): docs/apis.md#responses.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from gateway.api.edges.base import ApiEdge, StreamTranslator, Translated, translated
from gateway.api.edges.responses_request import ResponsesRequest, translate_request
from gateway.api.edges.responses_response import render_response
from gateway.api.edges.responses_stream import ResponsesStream
from gateway.wire.requests import ParsedRequest


class ResponsesEdge(ApiEdge[ResponsesRequest]):
    """``POST /v1/responses`` (endpoint label ``responses``)."""

    name = "responses"
    path = "/v1/responses"

    def translate(self, raw: bytes, request_id: str) -> Translated[ResponsesRequest]:
        """The chat request for a Responses request (400 naming any field it cannot honour)."""
        return translated(translate_request(raw, request_id, int(time.time())))

    def render(self, body: dict[str, Any], context: ResponsesRequest) -> bytes:
        """The Response object of a complete chat answer."""
        return orjson.dumps(render_response(body, context))

    def render_answer(
        self, answer: dict[str, Any], model_name: str, request: ParsedRequest, context: ResponsesRequest
    ) -> bytes:
        """The Response object of the upstream's answer. Without logprobs asked it is rendered from
        the answer as it is: the client view (``client_body``) would only drop the logprobs the
        Response does not read then, and name ``model_name``, given here (a copy saved)."""
        if context.wants_logprobs:  # the client view trims the alternatives to those asked
            return super().render_answer(answer, model_name, request, context)
        return orjson.dumps(render_response(answer, context, model_name or context.model))

    def stream_translator(self, context: ResponsesRequest) -> StreamTranslator:
        """The Responses event stream of one request."""
        return ResponsesStream(context)
