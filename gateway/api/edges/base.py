"""The edge protocol: what one HTTP API must supply to be served through the cascade.

An edge has a ``name`` (the ``endpoint`` label of metrics and logs) and a ``path``, and:

* ``credential(headers)``: the client key as an ``Authorization`` header value (``Bearer <key>``);
* ``translate(raw, request_id)``: parse its API's request and build the chat (or legacy
  completions) request the engine runs, as a ``Translated``. Every field it cannot honour is a
  ``BadRequestError`` (400) naming it, never silently dropped. ``sent_bytes`` is the size of the
  request the engine forwards: the spend reservation counts one prompt token per byte of it, so
  whatever the translation adds (instructions, tool schemas) is reserved for;
* ``render(body, context)``: the non-streamed answer (a client-shaped chat body) as its API's JSON;
  ``render_answer`` makes that body of the upstream's answer (``client_body``) and renders it, and
  an edge whose shape never reads what the client view changes may render the answer as it is;
* ``stream_translator(context)``: ``None`` when the engine's chat SSE bytes are already its API's
  stream, else a ``StreamTranslator`` turning them into its API's events;
* ``error_parts(error, request_id)``: an error as (status, headers, body) in its API's error shape;
* ``keepalive``: the bytes that keep a stream started early alive (gateway.streaming.early_start): an SSE
  comment unless the API has its own keep-alive event.

``OpenAIEdge`` is the identity edge of ``/v1/chat/completions`` and ``/v1/completions``: the client's
body is the engine's request and the engine's answer is the client's, with no extra parse or
serialization (the measured hot path, docs/benchmarks.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson

from gateway.stages.bodies import client_body
from gateway.wire.errors import GatewayError
from gateway.wire.exchange import Headers
from gateway.wire.requests import CompletionApi, ParsedRequest, encoded_size, parse_request

JSON_HEADER = (b"content-type", b"application/json")
_DONE_PAYLOAD = b"[DONE]"


def openai_error_parts(error: GatewayError, request_id: str | None = None) -> tuple[int, Headers, bytes]:
    """The one mapping of a GatewayError to (status, headers, OpenAI error body)."""
    headers = [JSON_HEADER]
    headers.extend((k.lower().encode(), v.encode()) for k, v in error.headers.items())
    if request_id:
        headers.append((b"x-request-id", request_id.encode()))
    return error.status, headers, orjson.dumps(error.body())


# What an edge keeps of a request to shape its answer (None for the identity edge).
Context = TypeVar("Context")
# The context of a translating edge.
Request = TypeVar("Request", bound="ChatTranslation")


@dataclass(slots=True)
class Translated(Generic[Context]):
    """A client request as the engine runs it.

    Attributes:
        request: the validated chat/completions request the cascade's stages are called with.
        sent_bytes: bytes of that request's JSON (the prompt bound of the spend reservation).
        context: what the edge needs to shape the answer (None for the identity edge).
    """

    request: ParsedRequest
    sent_bytes: int
    context: Context


@dataclass(slots=True)
class ChatTranslation:
    """A translated API request: the chat body the engine runs, and (in subclasses) what the answer
    needs. Each translating edge's request module builds one (gateway.api.edges.*_request).

    Attributes:
        chat: the chat-completions body the cascade runs (``model`` is still the client's).
        model: the ``model`` the client asked for.
        stream: whether the client wants its API's events.
        wants_logprobs: whether the chat body asks for logprobs the answer reports.
    """

    chat: dict[str, Any]
    model: str
    stream: bool
    wants_logprobs: bool


def translated(request: Request) -> Translated[Request]:
    """The engine's request for a translated one: the one place a translating edge's chat body
    becomes a ``ParsedRequest`` (one choice; streams report usage at their end) and is measured."""
    chat = request.chat
    stream = request.stream
    wants_logprobs = request.wants_logprobs
    parsed = ParsedRequest("chat", chat, request.model, stream, 1, wants_logprobs, stream)  # include_usage
    return Translated(parsed, encoded_size(chat), request)


class StreamTranslator(ABC):
    """Turns the engine's stream (chat SSE bytes) into one request's stream in its API's events."""

    @abstractmethod
    def translate(self, data: bytes) -> bytes:
        """The API's SSE bytes for one piece of the engine's SSE output (possibly several events,
        possibly none); the piece holding ``data: [DONE]`` gets the API's closing events."""

    @abstractmethod
    def fail(self, error: GatewayError) -> bytes:
        """The API's in-stream error event(s) that end a stream that failed after it started."""


class ChatStreamTranslator(StreamTranslator):
    """A ``StreamTranslator`` fed parsed chat chunks: subclasses implement ``feed`` and ``finish``.

    The engine writes whole events (``data: <json>\\n\\n``) in each piece, so a piece is split on
    event boundaries and each ``data:`` payload parsed once.
    """

    def translate(self, data: bytes) -> bytes:
        """Parse the engine's events and translate each (see ``feed``/``finish``)."""
        out = [self.feed(chunk) if chunk is not None else self.finish() for chunk in chat_chunks(data)]
        return b"".join(out)

    @abstractmethod
    def feed(self, chunk: dict[str, Any]) -> bytes:
        """The API's events for one chat chunk (its last one carries the ``cascade`` facts)."""

    @abstractmethod
    def finish(self) -> bytes:
        """The API's closing events, at the engine's ``[DONE]``."""


def chat_chunks(data: bytes) -> Iterator[dict[str, Any] | None]:
    """The chat chunks of SSE bytes the engine wrote, in order; ``None`` for ``data: [DONE]``."""
    for event in data.split(b"\n\n"):
        for line in event.split(b"\n"):
            if not line.startswith(b"data:"):
                continue  # blank remainders and ``event:`` lines (the engine writes none mid-stream)
            payload = line[5:].strip()
            if payload == _DONE_PAYLOAD:
                yield None
            else:
                chunk = orjson.loads(payload)
                if isinstance(chunk, dict):
                    yield chunk


class ApiEdge(ABC, Generic[Context]):
    """One HTTP API served through the cascade (see the module docstring)."""

    name: str
    path: str
    # Request headers the edge reads beyond the ones every endpoint reads (authorization,
    # content-length, the X-Cascade-* headers), lower-case.
    extra_headers: frozenset[bytes] = frozenset()
    # What keeps a stream started before its first event alive: a comment every SSE client skips.
    keepalive: bytes = b": keep-alive\n\n"

    def credential(self, headers: Mapping[bytes, bytes]) -> str | None:
        """The client's key as an ``Authorization`` header value (``Bearer <key>``), or None."""
        value = headers.get(b"authorization")
        return value.decode("latin-1") if value is not None else None

    @abstractmethod
    def translate(self, raw: bytes, request_id: str) -> Translated[Context]:
        """The request the engine runs; BadRequestError (400) naming any field it cannot honour."""

    @abstractmethod
    def render(self, body: dict[str, Any], context: Context) -> bytes:
        """The non-streamed answer in the API's shape, from the client-shaped chat ``body``."""

    def render_answer(
        self, answer: dict[str, Any], model_name: str, request: ParsedRequest, context: Context
    ) -> bytes:
        """The non-streamed answer in the API's shape, from the upstream's ``answer`` (answered by
        the configured model ``model_name``): ``render`` of its client view (``client_body``)."""
        return self.render(client_body(answer, model_name, request), context)

    def stream_translator(self, context: Context) -> StreamTranslator | None:
        """A translator of the engine's stream for one request, or None when none is needed."""
        return None

    def error_parts(self, error: GatewayError, request_id: str | None = None) -> tuple[int, Headers, bytes]:
        """An error as (status, headers, body) in the API's shape (OpenAI's unless overridden)."""
        return openai_error_parts(error, request_id)


class OpenAIEdge(ApiEdge[None]):
    """The identity edge of ``/v1/chat/completions`` (``chat``) and ``/v1/completions``."""

    def __init__(self, api: CompletionApi):
        self.api = api
        self.name = api
        self.path = "/v1/chat/completions" if api == "chat" else "/v1/completions"

    def translate(self, raw: bytes, request_id: str) -> Translated[None]:
        """The client's request as it is (validated by ``parse_request``)."""
        return Translated(parse_request(raw, self.api), len(raw), None)

    def render(self, body: dict[str, Any], context: None) -> bytes:
        """The client-shaped answer as it is."""
        return orjson.dumps(body)
