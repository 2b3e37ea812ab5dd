"""Anthropic Messages request -> the chat-completions body the cascade runs (docs/apis.md#v1messages).

The cascade's stages are chat completions (that is where the scorer's logprobs come from), so a
``POST /v1/messages`` body is translated field by field; every field is either translated, ignored
for a documented reason (``IGNORED_FIELDS``), or refused with a 400 naming it. Nothing else passes.

* ``system`` (a string or text blocks) -> a leading ``system`` message;
* ``messages``: text -> ``content``; ``image`` (base64 or URL source) -> an ``image_url`` part;
  assistant ``tool_use`` -> ``tool_calls`` (``input`` as JSON ``arguments``); user ``tool_result``
  -> a ``tool`` message (its content as text; ``is_error`` is stated in that text, as chat has no
  such flag); earlier turns' ``thinking``/``redacted_thinking`` blocks are dropped (the answers
  never carry them, and Anthropic's API also leaves earlier turns' thinking out of the context);
* ``tools`` (custom tools) -> ``function`` tools; ``tool_choice`` auto/any/tool/none -> auto/
  required/the named function/none, ``disable_parallel_tool_use`` -> ``parallel_tool_calls: false``;
* ``max_tokens`` (required, as in Anthropic's API) -> ``max_tokens``; ``stop_sequences`` -> ``stop``;
  ``temperature``, ``top_p`` and ``top_k`` are forwarded (``top_k`` as llama.cpp and vLLM name it);
* ``output_config.format`` (a JSON schema) -> ``response_format`` ``json_schema``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.api.edges.base import ChatTranslation
from gateway.api.edges.fields import (
    ChatTool,
    JSONObject,
    chat_tool,
    chat_tool_choice_function,
    required_model,
    sampling_fields,
)
from gateway.api.edges.messages_content import chat_messages, no_extra_keys, system_messages
from gateway.wire.errors import BadRequestError
from gateway.wire.requests import is_int, load_json_object

# Accepted and not forwarded, each for the reason given (docs/apis.md#v1messages).
IGNORED_FIELDS: dict[str, str] = {
    # Prompt caching is a hint to Anthropic's own servers about billing and latency; it changes no
    # answer, and the upstreams here have no such control (llama.cpp reuses its prompt cache anyway).
    "cache_control": "prompt caching hint",
    # End-user identifier for Anthropic's abuse detection; the gateway identifies callers by key
    # and does not hand client identifiers to third-party upstreams.
    "metadata": "end-user identifier",
    # Extended thinking is a budget, not a promise: the answer has no thinking blocks (the chat
    # upstreams have no separate signed reasoning channel) and max_tokens stays the cap.
    "thinking": "extended thinking",
    # Anthropic's capacity and region selection; the cascade chooses the models.
    "service_tier": "capacity selection",
    "inference_geo": "region selection",
    "speed": "capacity selection",
    # Server-side context editing (clearing old thinking/tool results) of Anthropic's context
    # management beta; Claude Code sends it by default. The gateway forwards the whole history.
    "context_management": "context editing",
}
_TRANSLATED_FIELDS = frozenset(
    {
        "model",
        "messages",
        "system",
        "max_tokens",
        "stop_sequences",
        "temperature",
        "top_p",
        "top_k",
        "tools",
        "tool_choice",
        "stream",
        "output_config",
    }
)
# Tool keys accepted and not forwarded: caching and streaming hints, and ``defer_loading`` (tool
# search: the tool is then simply offered up front, which costs tokens but changes no answer).
_TOOL_EXTRAS = frozenset({"type", "cache_control", "eager_input_streaming", "defer_loading"})


@dataclass(slots=True)
class MessagesRequest(ChatTranslation):
    """A translated Messages request: its chat body and what the answer needs (the edge's context).

    Attributes:
        stop_sequences: the client's stop sequences (an answer stopped by one reports it).
    """

    stop_sequences: tuple[str, ...]


def translate_request(raw: bytes) -> MessagesRequest:
    """Parse a ``/v1/messages`` body and build its chat body; BadRequestError (400) naming the field."""
    body = load_json_object(raw)
    for name in body:
        if name not in _TRANSLATED_FIELDS and name not in IGNORED_FIELDS:
            raise BadRequestError(
                f"'{name}' is not supported by this gateway's /v1/messages (docs/apis.md#v1messages)",
                param=name,
            )
    model = required_model(body)
    max_tokens = body.get("max_tokens")
    if not is_int(max_tokens) or max_tokens < 1:
        raise BadRequestError(
            "'max_tokens' is required and must be a positive integer (0, a prompt-cache warm-up, is "
            "not served: the gateway has no prompt cache)",
            param="max_tokens",
        )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequestError("'stream' must be a boolean", param="stream")
    _check_ignored(body)

    messages = system_messages(body.get("system"))
    messages.extend(chat_messages(body.get("messages")))
    chat: JSONObject = {"model": model, "messages": messages, "max_tokens": max_tokens}
    sampling_fields(body, chat)
    top_k = body.get("top_k")
    if top_k is not None:
        if not is_int(top_k) or top_k < 0:
            raise BadRequestError("'top_k' must be a non-negative integer", param="top_k")
        chat["top_k"] = top_k
    stops = _stop_sequences(body.get("stop_sequences"))
    if stops:
        chat["stop"] = list(stops)
    tools = body.get("tools")
    if tools is not None:
        chat_tools = _tools(tools)
        if chat_tools:
            chat["tools"] = chat_tools
    if body.get("tool_choice") is not None:
        _tool_choice(body["tool_choice"], chat)
    if body.get("output_config") is not None:
        _output_config(body["output_config"], chat)
    if stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}  # the closing event reports usage
    return MessagesRequest(chat, model, stream, False, stops)


def _check_ignored(body: JSONObject) -> None:
    """The ignored fields still have to be well formed (a typo is not silently accepted)."""
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise BadRequestError("'metadata' must be an object", param="metadata")
    thinking = body.get("thinking")
    if thinking is not None and (
        not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "disabled", "adaptive")
    ):
        raise BadRequestError(
            "'thinking' must be an object with 'type' enabled, disabled or adaptive", param="thinking"
        )


def _tools(tools: object) -> list[ChatTool]:
    if not isinstance(tools, list):
        raise BadRequestError("'tools' must be an array", param="tools")
    out = []
    for i, tool in enumerate(tools):
        at = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise BadRequestError(f"'{at}' must be an object", param=at)
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise BadRequestError(
                f"tool type {kind!r} at '{at}' is not supported: only custom tools (name, description, "
                "input_schema) are served; Anthropic-defined and server tools need Anthropic's models",
                param=at,
            )
        name, schema = tool.get("name"), tool.get("input_schema")
        if not isinstance(name, str) or not name:
            raise BadRequestError(f"'{at}.name' must be a non-empty string", param=f"{at}.name")
        if not isinstance(schema, dict):
            raise BadRequestError(
                f"'{at}.input_schema' must be a JSON schema object", param=f"{at}.input_schema"
            )
        no_extra_keys(tool, {"name", "description", "input_schema", "strict"} | _TOOL_EXTRAS, at)
        out.append(chat_tool(at, name, schema, tool))
    return out


def _tool_choice(choice: object, chat: JSONObject) -> None:
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "auto":
        chat["tool_choice"] = "auto"
    elif kind == "any":
        chat["tool_choice"] = "required"
    elif kind == "none":
        chat["tool_choice"] = "none"
    elif kind == "tool" and isinstance(choice, dict) and isinstance(choice.get("name"), str):
        chat["tool_choice"] = chat_tool_choice_function(choice["name"])
    else:
        raise BadRequestError(
            "'tool_choice' must be {type: auto|any|none} or {type: tool, name: <tool>}", param="tool_choice"
        )
    assert isinstance(choice, dict)
    disable = choice.get("disable_parallel_tool_use")
    if disable is not None and not isinstance(disable, bool):
        raise BadRequestError(
            "'tool_choice.disable_parallel_tool_use' must be a boolean",
            param="tool_choice.disable_parallel_tool_use",
        )
    if disable:
        chat["parallel_tool_calls"] = False


def _output_config(config: object, chat: JSONObject) -> None:
    if not isinstance(config, dict):
        raise BadRequestError("'output_config' must be an object", param="output_config")
    for key in config:
        if key not in ("format", "effort"):
            raise BadRequestError(
                f"'output_config.{key}' is not supported by this gateway's /v1/messages",
                param=f"output_config.{key}",
            )
    # ``effort`` (how hard a thinking model works; Claude Code always sends it) is ignored like
    # ``thinking``: the cascade's stages have no such dial.
    effort = config.get("effort")
    if effort is not None and effort not in ("low", "medium", "high", "xhigh", "max"):
        raise BadRequestError(
            "'output_config.effort' must be low, medium, high, xhigh or max", param="output_config.effort"
        )
    fmt = config.get("format")
    if fmt is None:
        return
    schema = fmt.get("schema") if isinstance(fmt, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(schema, dict):
        raise BadRequestError(
            "'output_config.format' must be {type: json_schema, schema: {...}}", param="output_config.format"
        )
    chat["response_format"] = {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": True},
    }


def _stop_sequences(stops: object) -> tuple[str, ...]:
    if stops is None:
        return ()
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise BadRequestError(
            "'stop_sequences' must be an array of non-empty strings", param="stop_sequences"
        )
    return tuple(stops)
