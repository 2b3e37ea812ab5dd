"""Chat-completions answers and gateway errors in the Anthropic Messages shapes (docs/apis.md#v1messages).

* ``render_message``: a complete chat answer -> an Anthropic ``message`` (``msg_...`` id, content
  blocks ``text`` and ``tool_use`` with the parsed ``input``, ``stop_reason``, ``usage``);
* ``stop_reason``: chat ``finish_reason`` -> ``end_turn`` / ``max_tokens`` / ``stop_sequence`` /
  ``tool_use`` / ``refusal``. OpenAI-compatible chat answers do not say which stop sequence ended
  them (vLLM does, as ``stop_reason``): without that, an answer that stopped is ``end_turn``;
* ``error_body``: a GatewayError -> ``{"type": "error", "error": {"type", "message"}}`` with the
  Anthropic error ``type`` of its HTTP status; an upstream's error adds its ``upstream`` object
  (the provider's own ``type`` and ``code``: Anthropic's shape has no field for them).
"""

from __future__ import annotations

import os
from typing import Any, NotRequired, TypedDict

import orjson

from gateway.api.edges.fields import JSONObject, first_choice
from gateway.wire.errors import GatewayError, UpstreamError
from money.usage import normalize_usage, positive_int

# Anthropic's error type per HTTP status (https://docs.claude.com/en/api/errors; the table in
# docs/contracts.md#http-surface is checked against this).
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_FINISH_TO_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


class ErrorDetail(TypedDict):
    """An Anthropic error's ``error`` object (``upstream``: an upstream's error, as it said it)."""

    type: str
    message: str
    upstream: NotRequired[dict[str, Any]]


class ErrorBody(TypedDict):
    """An Anthropic error body (``request_id`` when the request has one)."""

    type: str
    error: ErrorDetail
    request_id: NotRequired[str]


def error_type(status: int) -> str:
    """Anthropic's error ``type`` for an HTTP status (other 4xx: invalid_request_error; 5xx: api_error)."""
    return ERROR_TYPES.get(status) or ("invalid_request_error" if status < 500 else "api_error")


def error_body(error: GatewayError, request_id: str | None = None) -> ErrorBody:
    """The Anthropic error body of ``error`` (its message, never a traceback; an upstream's text
    only as its redacted message)."""
    detail: ErrorDetail = {"type": error_type(error.status), "message": error.message}
    if error.upstream is not None:
        detail["upstream"] = error.upstream
    body: ErrorBody = {"type": "error", "error": detail}
    if request_id:
        body["request_id"] = request_id
    return body


def message_id() -> str:
    """A new Anthropic-style message id."""
    return "msg_" + os.urandom(12).hex()


def tool_use_id(upstream_id: object) -> str:
    """The upstream's tool-call id (clients only echo it back), or a new ``toolu_`` id when it has none."""
    return upstream_id if isinstance(upstream_id, str) and upstream_id else "toolu_" + os.urandom(12).hex()


def stop_reason(
    finish_reason: object, has_tool_calls: bool, matched: object, stop_sequences: tuple[str, ...]
) -> tuple[str, str | None]:
    """(``stop_reason``, ``stop_sequence``) of a chat choice; ``matched`` is vLLM's ``stop_reason``.

    Raises TypeError (an unreadable answer) when ``finish_reason`` is neither null nor a string.
    """
    if has_tool_calls and finish_reason in (None, "stop", "tool_calls", "function_call"):
        return "tool_use", None
    if finish_reason == "stop" and isinstance(matched, str) and matched in stop_sequences:
        return "stop_sequence", matched
    if finish_reason is not None and not isinstance(finish_reason, str):
        # An answer the gateway cannot read (gateway.wire.answer_reading): a 502, or a stream's error event.
        raise TypeError("finish_reason is not a string")
    return _FINISH_TO_STOP.get(finish_reason or "stop", "end_turn"), None


def usage(chat_usage: object) -> dict[str, int]:
    """Anthropic ``usage`` (additive form) from chat ``usage`` (subset form, ``money.usage``): the
    upstream's cache reads and writes move out of ``input_tokens`` into their own counts, as
    Anthropic reports them (0 when the upstream reported none)."""
    chat_usage = chat_usage if isinstance(chat_usage, dict) else {}
    normal = normalize_usage(chat_usage)
    if normal is None:
        return {
            "input_tokens": positive_int(chat_usage.get("prompt_tokens")),
            "output_tokens": positive_int(chat_usage.get("completion_tokens")),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
    return {
        "input_tokens": normal.uncached_prompt_tokens,
        "output_tokens": normal.completion_tokens,
        "cache_creation_input_tokens": normal.cache_write_tokens + normal.cache_write_1h_tokens,
        "cache_read_input_tokens": normal.cache_read_tokens,
    }


def tool_input(arguments: object) -> JSONObject:
    """A tool call's ``arguments`` (JSON text) as the ``input`` object Anthropic clients expect.

    Raises UpstreamError (502) when they are not a JSON object: a ``tool_use`` block without a
    usable input would fail in the client, far from its cause.
    """
    if isinstance(arguments, dict):
        return arguments
    if arguments in (None, ""):
        return {}
    try:
        parsed = orjson.loads(arguments) if isinstance(arguments, str | bytes) else None
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise UpstreamError("the upstream model's tool call arguments are not a JSON object")
    return parsed


def content_blocks(message: JSONObject) -> list[JSONObject]:
    """A chat ``message`` as Anthropic content blocks: its text, then its tool calls."""
    blocks: list[JSONObject] = []
    text = _text(message.get("content"))
    if text:
        blocks.append({"type": "text", "text": text})
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        blocks.append(
            {
                "type": "tool_use",
                "id": tool_use_id(call.get("id")),
                "name": function.get("name") or "",
                "input": tool_input(function.get("arguments")),
            }
        )
    return blocks


def render_message(chat: JSONObject, model: str, stop_sequences: tuple[str, ...]) -> JSONObject:
    """A complete chat answer (its first choice) as an Anthropic ``message`` answered by ``model``."""
    choice, message = first_choice(chat)
    blocks = content_blocks(message)
    reason, sequence = stop_reason(
        choice.get("finish_reason"),
        any(b["type"] == "tool_use" for b in blocks),
        choice.get("stop_reason"),
        stop_sequences,
    )
    return {
        "id": message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage(chat.get("usage")),
    }


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return ""
