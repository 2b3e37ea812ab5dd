"""Finish a committed cheap stream that broke, from the text it already sent.

A ``prefix`` tier's cheap stage, once committed to (gateway.streaming.prefix_commit), streams live
to the client. When that stream breaks (cut: it ends without ``[DONE]`` or a ``finish_reason``;
stalled: no byte within the model's ``timeout_s``, the per-read timeout of every upstream stream;
a malformed chunk), the client holds part of an answer. ``StreamFinish`` lets the live relay
(gateway.streaming.live) ask the next stage to continue it: the final stage's request with the text
sent so far as a last assistant message, in the form its model declares
(``policies.capabilities.ModelCapabilities.continue_assistant`` and ``continue_form``). Its chunks
go on in the same SSE stream (the first stream's ``id``, ``created`` and model name, no second
``role``), and the stream ends as any other does. Both calls are charged by the one rule
(``money.charges``): the broken one as a broken stream is (``ending_attempt``), the continuation by
its own ending.

No continuation (the relay's error event, as without this module) when the final model does not
declare the capability, the stream carried tool calls (only text is continued), nothing was sent
yet, the cheap stage's stall left the final stage queued behind it on the same upstream, or the
cheap stream already used the whole completion cap. A continuation that fails in turn ends the
stream with the error event too: never a truncated success.

A server may repeat the prefill at the start of its answer (llama-server does, in its first content
chunk): a continuation that begins with the whole sent text has it removed.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import orjson

from gateway.config.settings import ModelConfig
from gateway.stages.bodies import stage_body
from gateway.streaming.live_charge import Ending, LiveCall, Settle
from gateway.streaming.sse import upstream_events
from gateway.upstream.client import UpstreamClient
from gateway.upstream.completion import read_completion
from gateway.upstream.failure import UpstreamFailure
from gateway.wire.facts import CascadeFacts
from gateway.wire.requests import ParsedRequest
from money.charges import COMPLETION_CAP_FIELDS, output_cap


def continuation_fields(config: ModelConfig) -> dict[str, Any]:
    """The request fields that make ``config``'s model continue the last assistant message (the
    ``prefill`` form needs none: the last message is the prefill)."""
    if config.capabilities.continue_form == "continue_final_message":
        return {"continue_final_message": True, "add_generation_prompt": False}
    return {}


class StreamFinish:
    """Watches a committed cheap stream and, when it breaks, streams its continuation (module docstring)."""

    __slots__ = (
        "_base",
        "_cheap",
        "_client",
        "_config",
        "_facts",
        "_request",
        "_settle",
        "_text",
        "_tokens",
        "_tools",
    )

    def __init__(
        self,
        cheap: ModelConfig,
        final: ModelConfig,
        client: UpstreamClient,
        request: ParsedRequest,
        facts: CascadeFacts,
        settle: Settle,
    ):
        """``cheap`` and ``final``: the two stages' configs; ``client``: the final stage's."""
        self._cheap = cheap
        self._config = final
        self._client = client
        self._request = request
        self._facts = facts
        self._settle = settle
        self._text: list[str] = []
        self._tokens = 0
        self._tools = False
        self._base: dict[str, Any] = {}  # the first stream's id, created, fingerprint

    def observe(self, event: dict[str, Any]) -> None:
        """One chunk of the cheap stream (before it is made the client's): its text and identity."""
        if not self._base:
            self._base = {k: event[k] for k in ("id", "created", "system_fingerprint") if k in event}
        for choice in event.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                continue
            if delta.get("tool_calls"):
                self._tools = True
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._text.append(content)
                self._tokens += 1

    def rest(self, failure: UpstreamFailure, deadline: float) -> AsyncGenerator[dict[str, Any], None] | None:
        """The continuation's upstream chunks, made part of the first stream; None when the stream
        cannot be finished (module docstring). Its call is charged however it ends."""
        if self._tools or not self._text:
            return None
        if failure.kind == "timeout" and self._cheap.upstream == self._config.upstream:
            return None  # the final stage would wait behind the stalled call
        body = self._body()
        if body is None:
            return None
        self._facts.continued_by = self._client.name
        self._facts.continued_after_tokens = self._tokens
        return self._chunks(body, deadline)

    def _body(self) -> bytes | None:
        """The final stage's live request with the sent text as a last assistant message, its cap
        what is left of the one the cheap stream was sent (None: nothing is left)."""
        config, request = self._config, self._request
        sent = orjson.loads(stage_body(request, config, top_k=None, stream=True))
        left = output_cap(sent, config.default_max_tokens) - self._tokens
        if left < 1:
            return None
        for name in COMPLETION_CAP_FIELDS:
            if name in sent:
                sent[name] = left
        sent["messages"] = [*sent["messages"], {"role": "assistant", "content": "".join(self._text)}]
        sent.update(continuation_fields(config))
        return orjson.dumps(sent)

    async def _chunks(self, body: bytes, deadline: float) -> AsyncGenerator[dict[str, Any], None]:
        """Stream the continuation: its chunks as the first stream's, charged once however it ends."""
        call = LiveCall(self._client.name, body, self._facts, self._settle)
        self._facts.models_called.append(call.model)
        echo = EchoCut("".join(self._text))
        try:
            async with self._client.stream("chat", body, deadline, call.attempts) as response:
                if response.content_type == "application/json":  # an upstream that ignores ``stream``
                    call.interrupted = Ending.CUT_JSON
                    call.whole = await read_completion(response, call.model)
                    call.end(Ending.WHOLE)
                    yield self._as_chunk(call.whole, echo)
                    return
                call.interrupted = Ending.BROKEN
                first = call.first_chunk if self._facts.trace is not None else None  # the console's
                async for event in upstream_events(response, call.model, self._client.redact, first):
                    call.tally.observe(event)
                    yield self._aligned(event, echo)
                call.end(Ending.COMPLETE)
        except UpstreamFailure as failure:
            if failure.kind == "circuit_open":  # skipped, never called
                self._facts.models_called.remove(call.model)
            raise
        finally:
            call.end(call.interrupted)

    def _aligned(self, event: dict[str, Any], echo: EchoCut) -> dict[str, Any]:
        """A continuation chunk as a chunk of the first stream: its identity, no second role, the
        repeated prefill cut."""
        event.update(self._base)
        for choice in event.get("choices") or ():
            delta = choice.get("delta")
            if isinstance(delta, dict):
                delta.pop("role", None)
                if isinstance(delta.get("content"), str):
                    delta["content"] = echo.cut(delta["content"])
        return event

    def _as_chunk(self, answer: dict[str, Any], echo: EchoCut) -> dict[str, Any]:
        """A whole JSON continuation as one last chunk of the stream."""
        choices = answer.get("choices") or [{}]
        choice = choices[0] if isinstance(choices[0], dict) else {}
        message = choice.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        delta = {"content": echo.cut(content if isinstance(content, str) else "")}
        chunk = {
            **self._base,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": choice.get("finish_reason") or "stop"}],
        }
        if isinstance(answer.get("usage"), dict):
            chunk["usage"] = answer["usage"]
        return chunk


class EchoCut:
    """Removes the sent text where a continuation repeats it whole at its start (llama-server sends
    the prefill back in its first content chunk); text that departs from it passes unchanged."""

    __slots__ = ("_held", "_prefix", "_settled")

    def __init__(self, prefix: str):
        self._prefix = prefix
        self._held = ""  # the start of the answer read so far, while it may still be the echo
        self._settled = False

    def cut(self, text: str) -> str:
        """The part of ``text`` (the continuation's next content) that is new to the client."""
        if self._settled or not text:
            return text
        held = self._held + text
        if held.startswith(self._prefix):  # the whole echo: what follows it is the continuation
            self._settled = True
            return held[len(self._prefix) :]
        if self._prefix.startswith(held):  # still possibly the echo: hold it
            self._held = held
            return ""
        self._settled = True  # not an echo: everything held is the continuation's own text
        return held
