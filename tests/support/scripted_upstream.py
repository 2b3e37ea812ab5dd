"""The scripted OpenAI-compatible upstream on loopback, for every test package (the seam double).

One aiohttp server (own thread and event loop, random free port) answers
``POST /v1/chat/completions``, ``POST /v1/completions`` and ``GET /v1/models`` for any number of
upstream model ids; the ``model`` field of each request picks the script. Tests queue replies per
model id with ``script(model_id, reply, ...)``; when a model's queue is empty it answers
``default_reply`` (a confident "ok"). Every request is recorded (path, model, parsed body,
authorization header), and so is every request whose client went away before the reply was done
(``cancelled``), which is how tests see that a client disconnect reached the upstream.
``produced`` lists the usage of every answer the upstream sent in full (``Produced``: model id,
prompt and completion tokens). ``billed`` is what a provider bills, whatever the client did: every
non-streamed answer it was asked for (a provider finishes and bills it even when the client timed
out, the body was cut or the connection dropped), every stream at the tokens it wrote (all of its
usage once finished). Spend tests price these.

A request asking for ``n`` choices gets ``n`` choices (non-streamed), each of the reply's text;
its usage bills ``usage[1]`` completion tokens per generated choice, ``max(n, best_of)`` of them,
and the prompt once, as OpenAI-compatible servers do. A ``/v1/completions`` request whose ``prompt``
is a list of prompts (strings or token arrays) is that many completions: ``n`` choices and the
billed choices for each prompt (``usage[0]`` stays the prompt count of the whole request).

Replies (see ``Reply``): an answer with token logprobs of a chosen confidence (honouring
``logprobs``/``top_logprobs`` like llama.cpp), with tool calls, without logprobs, a captured
real llama.cpp body, an HTTP error (5xx, 429 + Retry-After), a slow answer, malformed JSON, and
streams (SSE, optionally slow per chunk, cut off after N chunks, or of verbatim events), and the
faults of a network or a provider after the request was sent: a body cut mid-way (200, part of the
body, connection closed), a body that stalls mid-way, a connection dropped without an answer. A
reply can honour the completion cap the request sends (``honour_cap``: what a provider does; its
answer is otherwise as long as scripted) and bill content parts (``image_tokens`` per image,
``part_tokens`` per part of any other type a provider may take, ``audio_url`` say). Every
stream is recorded with the tokens it wrote before it stopped (``streams``), so tests know what an
abandoned stream really cost.

``bills`` is what a provider would bill: one ``Bill`` (tests/support/provider_bills.py) per request
answered 200, written when the request arrives, so a request the gateway then timed out on, dropped
or read half of is billed too. The fault matrix's replies are *metered* (``usage_report``): generated
from the request (cut at the cap it sent, or ``uncapped_tokens`` long when it sent none), their
usage the bill, reported exactly, not at all, as strings or as a huge lie; and they fail in whichever
form the request asked, whole or streamed: a stall mid-body, a cut body, a dropped connection,
garbage JSON, or content nested deeper than a JSON writer goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections import defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
from aiohttp import web

from money.usage import positive_int
from tests.support.provider_bills import (
    GARBAGE_BODY,
    GARBAGE_EVENTS,
    NEST_MARK,
    Bill,
    capped_tokens,
    nest,
    nested_value,
    new_bill,
    reported_usage,
)


@dataclass
class Reply:
    """One scripted upstream reply.

    Attributes:
        status: HTTP status (non-200 sends ``{"error": ...}`` unless ``raw``/``body`` is given).
        content: the answer text (``None`` with ``tool_calls``).
        confidence: probability of every chosen token; the other top-K alternatives share the rest.
            ``None``: the answer carries no logprobs even when asked.
        tool_calls: OpenAI ``message.tool_calls`` to return instead of text.
        delay_s: wait before answering (slow upstream / timeouts).
        headers: extra response headers (e.g. ``Retry-After``).
        raw: bytes sent verbatim as the body (malformed JSON).
        body: a complete JSON body sent as is (e.g. a captured llama.cpp response).
        usage: (prompt_tokens, completion_tokens); None: a non-streamed answer reports no usage
            (billed as (10, 5) per choice in ``produced``).
        chunk_delay_s: pause between streamed chunks.
        break_stream_after: close the connection after this many streamed chunks (no [DONE]).
        ignore_stream: answer with one JSON body even when the request asks for a stream.
        stream_events: stream exactly these ``data:`` objects (then ``[DONE]``) instead of an answer
            built from ``content`` (e.g. ``choices: []`` or non-object choices).
        max_alternatives: give at most this many alternatives per position, whatever was asked (a
            provider's cap on ``top_logprobs``).
        refuse_logprobs: answer 400 to a request carrying ``logprobs`` or ``top_logprobs`` (an API
            that refuses the fields, as OpenAI's reasoning models do); a request without them is answered.
        usage_report: set: a metered reply (tests/support/provider_bills.py): its text is cut at the
            request's cap, its usage is its bill, reported as ``USAGE_REPORTS`` says.
        uncapped_tokens: a metered reply's answer is this many tokens, or the cap the request sends.
        cut_body: send the headers and half the body (a stream: its first two events), then close
            (``cut_body_at``: that many bytes of a non-streamed answer).
        garbage: answer 200 with a body (or one SSE event) that is not JSON.
        nesting_depth: a metered reply's content (a stream: its first content delta) and its
            ``finish_reason`` are a list nested this deep.
        cut_body_at: send the 200 headers (with the whole body's length) and only this many bytes
            of a non-streamed answer, then close the connection.
        stall_body_s: send the 200 headers and half of a non-streamed answer (a stream: its first two
            events), then wait this long before the rest (a timeout mid-body).
        drop_connection: close the connection without answering (after reading the request).
        stops_on_close: a stream stops generating when its client closes the connection and is
            billed the tokens it wrote (``bills`` gets it when the stream ends), as llama-server
            does; otherwise a stream is billed whole on arrival, however it ends.
        honour_cap: bill (and report) at most the completion cap the request sends per choice
            (``n_predict``, ``max_completion_tokens``, ``max_tokens``: the first one set), as a
            provider does; without a cap the scripted usage stands (an answer of any length).
        image_tokens: prompt tokens billed (and reported) per ``image_url`` part of the messages.
        part_tokens: prompt tokens billed (and reported) per content part of each type named (as
            vLLM bills the ``audio_url`` and ``video_url`` parts it takes).
        finish_reason: the answer's ``finish_reason`` (e.g. ``length``: cut at a cap); None: ``stop``
            (``tool_calls`` with calls).
        hold_first: the first chunk of a stream (after its 200 headers), or a whole answer, waits
            until this event is set (at most ``HOLD_LIMIT_S``): a first token as late as the test
            makes it, without a clock. Set it before the test ends.
        stall_at_chunk: the streamed chunk a ``stall_body_s`` stall comes before (a stall after
            that many chunks: the role chunk and the tokens before it).
        garbage_at_chunk: that streamed chunk is replaced by an event that is not JSON (a
            malformed chunk in the middle of a stream).
        omit_done: a stream writes every event, its finish reason and usage included, and ends its
            body cleanly without ``[DONE]``.
    """

    status: int = 200
    content: str | None = "Paris is the capital of France."
    confidence: float | None = 0.99
    tool_calls: list[dict[str, Any]] | None = None
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None
    body: dict[str, Any] | None = None
    usage: tuple[int, int] | None = (10, 5)
    chunk_delay_s: float = 0.0
    break_stream_after: int | None = None
    ignore_stream: bool = False
    stream_events: list[dict[str, Any]] | None = None
    max_alternatives: int | None = None
    refuse_logprobs: bool = False
    usage_report: str | None = None
    uncapped_tokens: int | None = None
    stall_body_s: float = 0.0
    cut_body: bool = False
    drop_connection: bool = False
    garbage: bool = False
    nesting_depth: int | None = None
    cut_body_at: int | None = None
    honour_cap: bool = False
    stops_on_close: bool = False
    image_tokens: int = 0
    part_tokens: dict[str, int] = field(default_factory=dict)
    finish_reason: str | None = None
    hold_first: threading.Event | None = None
    stall_at_chunk: int = 2
    garbage_at_chunk: int | None = None
    omit_done: bool = False


def ok(content: str = "Paris is the capital of France.", confidence: float | None = 0.99, **kw: Any) -> Reply:
    """A 200 answer whose tokens each have probability ``confidence`` (None: no logprobs)."""
    return Reply(content=content, confidence=confidence, **kw)


def error(status: int, retry_after: float | str | None = None, **kw: Any) -> Reply:
    """An HTTP error reply, optionally with a Retry-After header (seconds)."""
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    return Reply(status=status, headers=headers, **kw)


@dataclass(frozen=True)
class Produced:
    """Usage of one answer the upstream sent in full (what a provider bills)."""

    model: str | None
    prompt_tokens: int
    completion_tokens: int


@dataclass
class RecordedRequest:
    """What the upstream received."""

    path: str
    model: str | None
    body: dict[str, Any]
    authorization: str | None


@dataclass
class StreamRecord:
    """What one streamed reply produced: the tokens (content chunks) written before it stopped.

    ``prompt_tokens`` is the prompt count the reply reports in its usage; ``finished`` is whether
    ``[DONE]`` was written. Tests price these to know the true spend of an abandoned stream.
    """

    model: str | None
    prompt_tokens: int
    completion_tokens: int = 0
    finished: bool = False
    closed: bool = False  # the reply's handler is over (finished, failed or its client gone)


class ScriptedUpstream:
    """The server; start() it once, reset() between tests."""

    def __init__(self) -> None:
        self.port = 0
        self.streams: list[StreamRecord] = []
        self.requests: list[RecordedRequest] = []
        self.cancelled: list[str | None] = []
        self.completed: list[str | None] = []
        self.produced: list[Produced] = []
        self.bills: list[Bill] = []
        self.billed: list[Produced] = []
        self._scripts: dict[str, deque[Reply]] = defaultdict(deque)
        self._defaults: dict[str, Reply] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """OpenAI base URL of this server (``http://127.0.0.1:<port>/v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- scripting -------------------------------------------------------------------------------

    def script(self, model_id: str, *replies: Reply) -> None:
        """Queue replies for requests naming upstream model id ``model_id`` (used in order)."""
        with self._lock:
            self._scripts[model_id].extend(replies)

    def set_default(self, model_id: str, reply: Reply) -> None:
        """The reply for ``model_id`` once its queue is empty."""
        self._defaults[model_id] = reply

    def reset(self) -> None:
        """Forget scripts, defaults and recorded requests."""
        with self._lock:
            self.streams.clear()
            self._scripts.clear()
            self._defaults.clear()
            self.requests.clear()
            self.cancelled.clear()
            self.completed.clear()
            self.produced.clear()
            self.bills.clear()
            self.billed.clear()

    def calls(self, model_id: str | None = None) -> list[RecordedRequest]:
        """Recorded requests, optionally only those naming ``model_id``."""
        return [r for r in self.requests if model_id is None or r.model == model_id]

    def wait_for(self, predicate: Any, timeout_s: float = 5.0) -> bool:
        """Poll until ``predicate()`` is true (for effects that land after the client returns)."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if predicate():
                return True
            time.sleep(0.01)
        return bool(predicate())

    def _next_reply(self, model_id: str | None) -> Reply:
        with self._lock:
            queue = self._scripts.get(model_id or "")
            if queue:
                return queue.popleft()
        return self._defaults.get(model_id or "", Reply(content=f"answer from {model_id}"))

    # -- lifecycle -------------------------------------------------------------------------------

    def application(self) -> web.Application:
        """A new aiohttp application answering as this upstream (one per event loop it runs on:
        the loopback server's, or a gateway's reaching it in-process, tests/support/in_process_gateway.py)."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/v1/completions", self._handle)
        app.router.add_get("/v1/models", self._models)
        return app

    def start(self, port: int = 0) -> None:
        """Start serving on loopback ``port`` (0: a free one); returns once listening."""
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            self._runner = web.AppRunner(self.application(), handler_cancellation=True, access_log=None)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", port)
            loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="scripted-upstream", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("scripted upstream did not start")

    def stop(self) -> None:
        """Stop the server and its thread."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    # -- handlers --------------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": []})

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return web.json_response({"error": {"message": "bad json"}}, status=400)
        model = body.get("model")
        self.requests.append(RecordedRequest(request.path, model, body, request.headers.get("Authorization")))
        reply = self._next_reply(model)
        if reply.usage_report is not None:
            reply = _metered(reply, body, len(raw))
        refused = reply.refuse_logprobs and ("logprobs" in body or "top_logprobs" in body)
        streamed = bool(body.get("stream")) and not reply.ignore_stream
        arrival = new_bill(model, request.path, raw, (reply.usage or (10, 5))[1] * _billed_choices(body))
        if reply.status == 200 and not refused and not (reply.stops_on_close and streamed):
            self.bills.append(arrival)  # billed on arrival, however the answer then goes
        answered = reply.status == 200 and reply.raw is None and not reply.refuse_logprobs
        if answered and not (body.get("stream") and not reply.ignore_stream):
            # A provider bills an answer it was asked for, whether or not the client gets it.
            prompt, completion = _usage_of(body, reply)
            self.billed.append(Produced(model, prompt, completion * _billed_choices(body)))
        try:
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
            if reply.hold_first is not None and not streamed:
                await _held(reply.hold_first)
            if reply.drop_connection:
                request.transport.close()  # type: ignore[union-attr]
                self.completed.append(model)
                return web.Response()
            if reply.raw is not None:
                response = web.Response(
                    body=reply.raw,
                    status=reply.status,
                    headers=reply.headers,
                    content_type="application/json",
                )
            elif reply.body is not None:
                response = web.Response(
                    body=orjson.dumps(reply.body),
                    status=reply.status,
                    headers=reply.headers,
                    content_type="application/json",
                )
            elif reply.refuse_logprobs and ("logprobs" in body or "top_logprobs" in body):
                payload = {"error": {"message": "logprobs are not supported with this model", "type": "x"}}
                response = web.json_response(payload, status=400, headers=reply.headers)
            elif reply.status != 200:
                payload = {"error": {"message": f"scripted {reply.status}", "type": "server_error"}}
                response = web.Response(
                    body=orjson.dumps(payload),
                    status=reply.status,
                    headers=reply.headers,
                    content_type="application/json",
                )
            elif streamed:
                return await self._stream(request, body, reply, model, arrival)
            else:
                answer = _completion(request.path, body, reply)
                usage = answer.pop("_billed", None) or answer["usage"]
                if reply.usage_report is not None:
                    _report(answer, reply.usage_report, usage)
                payload = GARBAGE_BODY if reply.garbage else nest(orjson.dumps(answer), reply.nesting_depth)
                if reply.cut_body or reply.cut_body_at is not None or reply.stall_body_s:
                    return await self._broken_body(request, payload, reply, model)
                response = web.Response(
                    body=payload,
                    headers=reply.headers,
                    content_type="application/json",
                )
                self.produced.append(Produced(model, usage["prompt_tokens"], usage["completion_tokens"]))
            self.completed.append(model)
            return response
        except (asyncio.CancelledError, ConnectionResetError):
            self.cancelled.append(model)
            raise

    async def _broken_body(
        self, request: web.Request, payload: bytes, reply: Reply, model: str | None
    ) -> web.StreamResponse:
        """A 200 whose body is cut (``cut_body_at`` bytes, or half with ``cut_body``) or stalls
        half-way (``stall_body_s``)."""
        response = web.StreamResponse(headers={"Content-Type": "application/json", **reply.headers})
        response.content_length = len(payload)
        await response.prepare(request)
        sent = reply.cut_body_at if reply.cut_body_at is not None else len(payload) // 2
        await response.write(payload[:sent])
        if reply.cut_body_at is not None or reply.cut_body:
            request.transport.close()  # type: ignore[union-attr]
            self.completed.append(model)
            return response
        await asyncio.sleep(reply.stall_body_s)
        await response.write(payload[sent:])
        await response.write_eof()
        self.completed.append(model)
        return response

    async def _stream(
        self, request: web.Request, body: dict[str, Any], reply: Reply, model: str | None, arrival: Bill
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **reply.headers})
        await response.prepare(request)
        prompt, per_choice = _usage_of(body, reply)
        record = StreamRecord(model, prompt)
        self.streams.append(record)
        try:
            return await self._write_stream(request, response, body, reply, model, record)
        finally:
            # A stream is billed at the tokens it wrote; all of its usage once it finished.
            completion = per_choice * _billed_choices(body) if record.finished else record.completion_tokens
            self.billed.append(Produced(model, prompt, completion))
            if reply.stops_on_close:  # billed what it wrote, dated when it arrived
                self.bills.append(replace(arrival, completion_tokens=completion))
            record.closed = True

    async def _write_stream(
        self,
        request: web.Request,
        response: web.StreamResponse,
        body: dict[str, Any],
        reply: Reply,
        model: str | None,
        record: StreamRecord,
    ) -> web.StreamResponse:
        if reply.stream_events is not None:
            chunks = [b"data: " + orjson.dumps(e) + b"\n\n" for e in reply.stream_events]
            first_token, tokens = 0, 0
        elif reply.garbage:
            chunks, first_token, tokens = list(GARBAGE_EVENTS), 0, 0
        else:
            chunks = _stream_chunks(request.path, body, reply)
            first_token = 1 if request.path.endswith("/chat/completions") else 0  # after the role chunk
            tokens = len(_tokens(reply.content))
            chunks = [nest(chunk, reply.nesting_depth) for chunk in chunks]
        break_after = 2 if reply.cut_body else reply.break_stream_after
        for index, chunk in enumerate(chunks):
            if break_after is not None and index >= break_after:
                request.transport.close()  # type: ignore[union-attr]
                self.completed.append(model)
                return response
            if reply.chunk_delay_s and index:
                await asyncio.sleep(reply.chunk_delay_s)
            if reply.hold_first is not None and not index:
                await _held(reply.hold_first)
            if reply.stall_body_s and index == reply.stall_at_chunk:
                await asyncio.sleep(reply.stall_body_s)
            await response.write(GARBAGE_EVENTS[0] if index == reply.garbage_at_chunk else chunk)
            if first_token <= index < first_token + tokens:
                record.completion_tokens += 1  # one token per content chunk, as real servers stream
        if not reply.omit_done:
            await response.write(b"data: [DONE]\n\n")
        record.finished = True
        await response.write_eof()
        self.completed.append(model)
        prompt, per_choice = _usage_of(body, reply)
        self.produced.append(Produced(model, prompt, per_choice * _billed_choices(body)))
        return response


# The longest a held reply waits for its test's event (a test that forgot to set it still ends).
HOLD_LIMIT_S = 10.0


async def _held(event: threading.Event) -> None:
    """Wait, off the server's loop, until the test sets ``event`` (at most ``HOLD_LIMIT_S``)."""
    await asyncio.get_running_loop().run_in_executor(None, event.wait, HOLD_LIMIT_S)


@contextlib.contextmanager
def running_upstream() -> Iterator[ScriptedUpstream]:
    """A started scripted upstream for the block, stopped afterwards."""
    server = ScriptedUpstream()
    server.start()
    try:
        yield server
    finally:
        server.stop()


# -- response builders ---------------------------------------------------------------------------


def _tokens(content: str | None) -> list[str]:
    if not content:
        return []
    words = content.split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


def _entry(token: str, confidence: float, k: int) -> dict[str, Any]:
    chosen = math.log(confidence)
    alternatives = [{"token": token, "logprob": chosen, "bytes": None}]
    if k > 1:
        rest = math.log(max(1e-12, (1 - confidence) / (k - 1)))
        alternatives += [{"token": f"alt{j}", "logprob": rest, "bytes": None} for j in range(1, k)]
    return {"token": token, "logprob": chosen, "bytes": None, "top_logprobs": alternatives[:k]}


def chat_logprobs(body: dict[str, Any], reply: Reply) -> dict[str, Any] | None:
    """The ``logprobs`` a chat answer to ``body`` carries for ``reply`` (None: not asked, or none)."""
    if not body.get("logprobs") or reply.confidence is None:
        return None
    asked = body["logprobs"]
    # ``logprobs: K`` (the integer form some providers take on chat) asks K alternatives.
    k = asked if type(asked) is int else int(body.get("top_logprobs") or 1)
    if reply.max_alternatives is not None:
        k = min(k, reply.max_alternatives)
    return {"content": [_entry(t, reply.confidence, k) for t in _tokens(reply.content)]}


def _legacy_logprobs(body: dict[str, Any], reply: Reply) -> dict[str, Any] | None:
    k = body.get("logprobs")
    if k is None or reply.confidence is None:
        return None
    k = max(int(k), 1) if reply.max_alternatives is None else min(max(int(k), 1), reply.max_alternatives)
    entries = [_entry(t, reply.confidence, k) for t in _tokens(reply.content)]
    return {
        "tokens": [e["token"] for e in entries],
        "token_logprobs": [e["logprob"] for e in entries],
        "top_logprobs": [{a["token"]: a["logprob"] for a in e["top_logprobs"]} for e in entries],
        "text_offset": list(range(len(entries))),
    }


def _prompts(body: dict[str, Any]) -> int:
    """Prompts of a request: the length of a ``prompt`` list of strings or token arrays, else 1."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(p, str | list) for p in prompt):
        return len(prompt)
    return 1


def _billed_choices(body: dict[str, Any]) -> int:
    """Choices generated (and billed) for a request: ``max(n, best_of)`` per prompt."""
    return max(positive_int(body.get("n")) or 1, positive_int(body.get("best_of")) or 1) * _prompts(body)


_CAP_FIELDS = ("n_predict", "max_completion_tokens", "max_tokens")


def _usage_of(body: dict[str, Any], reply: Reply) -> tuple[int, int]:
    """(prompt tokens, completion tokens per choice) of the answer to ``body``: the scripted usage
    (10, 5 when None), plus ``image_tokens`` per image part and ``part_tokens`` per part of each type
    named, the completion within the request's cap when the reply ``honour_cap``s."""
    prompt, completion = reply.usage or (10, 5)
    if reply.image_tokens:
        prompt += reply.image_tokens * _parts(body, "image_url")
    for part_type, tokens in reply.part_tokens.items():
        prompt += tokens * _parts(body, part_type)
    if reply.honour_cap:
        cap = next((body[f] for f in _CAP_FIELDS if body.get(f) is not None), None)
        if isinstance(cap, int | float) and not isinstance(cap, bool) and cap >= 0:
            completion = min(completion, math.ceil(cap))
    return prompt, completion


def _parts(body: dict[str, Any], part_type: str) -> int:
    """Content parts of type ``part_type`` in the messages of a chat request."""
    return sum(
        1
        for message in body.get("messages") or []
        if isinstance(message, dict) and isinstance(message.get("content"), list)
        for part in message["content"]
        if isinstance(part, dict) and part.get("type") == part_type
    )


def _completion(path: str, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    returned = (positive_int(body.get("n")) or 1) * _prompts(body)
    billed = _usage_of(body, reply)
    completion_tokens = billed[1] * _billed_choices(body)
    usage = {
        "prompt_tokens": billed[0],
        "completion_tokens": completion_tokens,
        "total_tokens": billed[0] + completion_tokens,
    }
    base: dict[str, Any] = {"id": "cmpl-scripted", "created": 1700000000, "model": body.get("model")}
    if reply.usage is not None:
        base["usage"] = usage
    else:
        base["_billed"] = usage  # what the provider bills, kept off the wire below
    if path.endswith("/chat/completions"):
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        finish = "stop"
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
            finish = "tool_calls"
        finish = reply.finish_reason or finish
        logprobs = chat_logprobs(body, reply)
        if reply.tool_calls and logprobs is not None:
            logprobs = {"content": []}  # no content tokens to score
        return {
            **base,
            "object": "chat.completion",
            "choices": [
                {"index": i, "message": message, "logprobs": logprobs, "finish_reason": finish}
                for i in range(returned)
            ],
        }
    return {
        **base,
        "object": "text_completion",
        "choices": [
            {
                "index": i,
                "text": reply.content or "",
                "logprobs": _legacy_logprobs(body, reply),
                "finish_reason": reply.finish_reason or "stop",
            }
            for i in range(returned)
        ],
    }


def _stream_chunks(path: str, body: dict[str, Any], reply: Reply) -> list[bytes]:
    chat = path.endswith("/chat/completions")
    base = {
        "id": "chunk-scripted",
        "created": 1700000000,
        "model": body.get("model"),
        "object": "chat.completion.chunk" if chat else "text_completion",
    }
    k = int(body.get("top_logprobs") or 1) if chat else int(body.get("logprobs") or 1)
    wants = bool(body.get("logprobs")) if chat else body.get("logprobs") is not None
    events: list[dict[str, Any]] = []
    if chat:
        events.append(
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": None},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
            }
        )
    for token in _tokens(reply.content):
        logprobs = None
        if wants and reply.confidence is not None:
            logprobs = {"content": [_entry(token, reply.confidence, k)]}
        if chat:
            choice = {"index": 0, "delta": {"content": token}, "logprobs": logprobs, "finish_reason": None}
        else:
            choice = {"index": 0, "text": token, "logprobs": logprobs, "finish_reason": None}
        events.append({**base, "choices": [choice]})
    finish = reply.finish_reason or "stop"
    final = (
        {"index": 0, "delta": {}, "finish_reason": finish}
        if chat
        else {"index": 0, "text": "", "finish_reason": finish}
    )
    events.append({**base, "choices": [final]})
    if (body.get("stream_options") or {}).get("include_usage"):
        prompt, per_choice = _usage_of(body, reply)
        completion = per_choice * _billed_choices(body)
        usage = reported_usage(reply.usage_report or "exact", prompt, completion)
        if usage is not None:
            events.append({**base, "choices": [], "usage": usage})
    return [b"data: " + orjson.dumps(e) + b"\n\n" for e in events]


def _metered(reply: Reply, body: dict[str, Any], prompt_bytes: int) -> Reply:
    """A metered reply as generated for ``body``: its text cut at the cap the request sent (or
    ``uncapped_tokens`` long when it sent none), its usage what is billed for one choice."""
    if reply.nesting_depth is not None:
        content: str | None = NEST_MARK
        produced = capped_tokens(len(nested_value(reply.nesting_depth)), body)
    else:
        text = " ".join(["tok"] * reply.uncapped_tokens) if reply.uncapped_tokens else reply.content
        words = _tokens(text)
        produced = capped_tokens(len(words), body)
        content = "".join(words[:produced]) if words else reply.content
    return replace(reply, content=content, usage=(prompt_bytes, produced))


def _report(answer: dict[str, Any], mode: str, usage: dict[str, Any]) -> None:
    """Put the usage a metered reply reports (by ``mode``) in ``answer``, or no usage at all."""
    reported = reported_usage(mode, usage["prompt_tokens"], usage["completion_tokens"])
    if reported is None:
        answer.pop("usage", None)
    else:
        answer["usage"] = reported
