"""``POST /v1/responses`` requests as the chat-completions request the cascade runs.

Field by field (docs/apis.md#responses): ``input`` (a string, or message, ``function_call`` and
``function_call_output`` items) and ``instructions`` become ``messages``; function ``tools``,
``tool_choice``, ``parallel_tool_calls``, ``temperature``, ``top_p``, ``max_output_tokens``
(``max_tokens``), ``text.format`` (``response_format``), ``text.verbosity``, ``reasoning.effort``
(``reasoning_effort``) and output-text logprobs are mapped to their chat fields. Hints that cannot
change the answer are accepted and not forwarded (caching and abuse-monitoring keys, service tier,
stream obfuscation, ``client_metadata``); ``metadata`` is echoed back. Everything else that would
change the answer or promise something the gateway cannot keep (stored responses and
``previous_response_id``, built-in tools, background runs, ``truncation: auto``, unknown fields)
is a 400 ``unsupported_parameter`` naming it: never silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.api.edges.base import ChatTranslation
from gateway.api.edges.fields import (
    ChatMessage,
    ChatTool,
    JSONObject,
    chat_tool,
    chat_tool_choice_function,
    optional_int,
    optional_str,
    required_model,
    required_str,
    sampling_fields,
)
from gateway.api.edges.responses_content import UNSUPPORTED, input_messages
from gateway.wire.errors import BadRequestError
from gateway.wire.requests import load_json_object, optional_bool

# Accepted and not forwarded: they steer OpenAI's own caching, abuse monitoring, billing tier or
# stream padding, or are a client's own bookkeeping; none can change an answer.
_IGNORED_HINTS = frozenset(
    {
        "prompt_cache_key",
        "prompt_cache_retention",
        "prompt_cache_options",
        "safety_identifier",
        "user",
        "service_tier",
        "stream_options",
        "client_metadata",
        "max_tool_calls",  # counts built-in tool calls only, and no built-in tool is accepted
    }
)
_MAPPED = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "text",
        "max_output_tokens",
        "temperature",
        "top_p",
        "top_logprobs",
        "metadata",
        "stream",
        "include",
        "reasoning",
        "store",
        "truncation",
    }
)
# Every field a request may carry without a check of its name (a stateful one is checked by value).
_ACCEPTED = _MAPPED | _IGNORED_HINTS
# Accepted only when null/false/empty, with the reason any other value is refused.
_STATEFUL = {
    "previous_response_id": "the gateway keeps no responses; send the whole conversation in 'input'",
    "conversation": "the gateway keeps no conversations; send the whole conversation in 'input'",
    "background": "background responses need stored responses, which the gateway does not keep",
    "prompt": "stored prompt templates are not available; send the text in 'instructions' and 'input'",
    "context_management": "server-side context compaction is not available",
    "moderation": "moderation is not available on this gateway",
}
# Accepted hints the Response object reports back as they were sent.
_ECHOED = ("prompt_cache_key", "safety_identifier", "user", "max_tool_calls")
_ECHOED_SET = frozenset(_ECHOED)
_TOOL_FIELDS = frozenset({"tools", "tool_choice", "parallel_tool_calls"})
_INCLUDABLE_LOGPROBS = "message.output_text.logprobs"
# Includables that add nothing here: they name outputs the gateway never produces (reasoning
# items, built-in tool calls) or echo input images the client already holds.
_INCLUDABLE_NOOP = frozenset(
    {
        "reasoning.encrypted_content",
        "file_search_call.results",
        "web_search_call.results",
        "web_search_call.action.sources",
        "message.input_image.image_url",
        "computer_call_output.output.image_url",
        "code_interpreter_call.outputs",
    }
)
_EFFORTS = frozenset({"none", "minimal", "low", "medium", "high", "xhigh"})
_VERBOSITY = frozenset({"low", "medium", "high"})


@dataclass(slots=True)
class ResponsesRequest(ChatTranslation):
    """A translated Responses request: its chat body and what the answer echoes (the edge's context)."""

    response_id: str
    created_at: int
    instructions: str | None
    tools: list[JSONObject]
    tool_choice: object
    parallel_tool_calls: bool
    temperature: float | None
    top_p: float | None
    max_output_tokens: int | None
    top_logprobs: int | None
    text: JSONObject
    reasoning: JSONObject
    metadata: dict[str, str]
    echo: JSONObject = field(default_factory=dict)  # accepted hints, as the response reports them


def translate_request(raw: bytes, request_id: str, now: int) -> ResponsesRequest:
    """Parse a ``/v1/responses`` body and build its chat body; BadRequestError (400) naming the field."""
    body = load_json_object(raw)
    # The hot path skips what an absent field cannot fail: each check is a call (docs/benchmarks.md).
    if not body.keys() <= _ACCEPTED:  # a stateful or unknown field: which one, and is it set?
        _refuse_unsupported_fields(body)
    model = required_model(body)
    if "store" in body or "truncation" in body:
        _refuse_storage_and_truncation(body)
    stream = optional_bool(body, "stream")
    instructions = optional_str(body, "instructions")
    messages: list[ChatMessage] = [{"role": "system", "content": instructions}] if instructions else []
    messages.extend(input_messages(body.get("input")))
    chat: JSONObject = {"model": model, "messages": messages}
    tools: list[JSONObject] = []
    tool_choice: object = None
    parallel: bool | None = None
    if not _TOOL_FIELDS.isdisjoint(body):
        tools, tool_choice, parallel = _tool_fields(body, chat)
    if "temperature" in body or "top_p" in body:
        sampling_fields(body, chat)
    cap = optional_int(body, "max_output_tokens", 1)
    if cap is not None:
        chat["max_tokens"] = cap
    text = _text_config(body["text"], chat) if "text" in body else {"format": {"type": "text"}}
    reasoning: JSONObject = {"effort": None, "summary": None}
    if "reasoning" in body:
        reasoning = _reasoning(body["reasoning"], chat)
    wants_logprobs = _include(body.get("include"))
    top_logprobs = optional_int(body, "top_logprobs", 0, 20) if "top_logprobs" in body else None
    if wants_logprobs:
        chat["logprobs"] = True
        chat["top_logprobs"] = top_logprobs or 0
    if stream:
        chat["stream"] = True  # the closing event reports usage: the engine asks every stream for it
    echo = {name: body[name] for name in _ECHOED if name in body} if not _ECHOED_SET.isdisjoint(body) else {}
    # Positional: a keyword call of the 18 fields costs more than the rest of the translation.
    return ResponsesRequest(
        chat,
        model,
        stream,
        wants_logprobs,
        f"resp_{request_id}",  # response_id
        now,  # created_at
        instructions,
        tools,
        tool_choice if tool_choice is not None else "auto",
        parallel if parallel is not None else True,  # parallel_tool_calls
        body.get("temperature"),
        body.get("top_p"),
        cap,  # max_output_tokens
        top_logprobs,
        text,
        reasoning,
        _metadata(body.get("metadata")),
        echo,
    )


def _refuse_unsupported_fields(body: JSONObject) -> None:
    """A stateful field set to something, or a field the gateway neither maps nor ignores: 400."""
    for name, value in body.items():
        if name in _STATEFUL:
            if value not in (None, False, "", [], {}):
                raise BadRequestError(
                    f"'{name}' is not supported: {_STATEFUL[name]}", param=name, code=UNSUPPORTED
                )
        elif name not in _MAPPED and name not in _IGNORED_HINTS:
            raise BadRequestError(
                f"'{name}' is not a supported Responses API field on this gateway",
                param=name,
                code=UNSUPPORTED,
            )


def _refuse_storage_and_truncation(body: JSONObject) -> None:
    """``store: true`` (the gateway keeps no responses) or a truncation other than disabled: 400."""
    store = body.get("store")
    if store is not None and not isinstance(store, bool):
        raise BadRequestError("'store' must be a boolean", param="store")
    if store:
        raise BadRequestError(
            "'store: true' is not supported: the gateway keeps no responses (send 'store: false')",
            param="store",
            code=UNSUPPORTED,
        )
    truncation = body.get("truncation")
    if truncation not in (None, "disabled"):
        raise BadRequestError(
            "'truncation' must be 'disabled': the gateway cannot drop input to fit a model's context",
            param="truncation",
            code=UNSUPPORTED,
        )


def _tool_fields(body: JSONObject, chat: JSONObject) -> tuple[list[JSONObject], object, bool | None]:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls`` as given (checked), set in ``chat``
    translated (parallel_tool_calls only alongside tools)."""
    tools = body.get("tools")
    if tools is None:
        tools = []
    elif not isinstance(tools, list):
        raise BadRequestError("'tools' must be an array", param="tools")
    elif tools:
        chat["tools"] = [_chat_tool(tool, i) for i, tool in enumerate(tools)]
    tool_choice = body.get("tool_choice")
    if tool_choice is not None:
        chat["tool_choice"] = _chat_tool_choice(tool_choice)
    parallel = body.get("parallel_tool_calls")
    if parallel is not None:
        if not isinstance(parallel, bool):
            raise BadRequestError("'parallel_tool_calls' must be a boolean", param="parallel_tool_calls")
        if tools:
            chat["parallel_tool_calls"] = parallel
    return tools, tool_choice, parallel


def _chat_tool(tool: object, index: int) -> ChatTool:
    where = f"tools[{index}]"
    if not isinstance(tool, dict):
        raise BadRequestError(f"'{where}' must be an object", param=where)
    kind = tool.get("type")
    if kind != "function":
        raise BadRequestError(
            f"'{where}': tools of type '{kind}' are not supported; only function tools are "
            "(built-in tools such as web_search or file_search run on OpenAI's servers)",
            param=where,
            code=UNSUPPORTED,
        )
    parameters = tool.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise BadRequestError(f"'{where}.parameters' must be an object", param=f"{where}.parameters")
    return chat_tool(where, required_str(tool, "name", where), parameters, tool)


def _chat_tool_choice(choice: object) -> object:
    if choice in ("none", "auto", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return chat_tool_choice_function(choice["name"])
    kind = choice.get("type") if isinstance(choice, dict) else choice
    raise BadRequestError(
        f"'tool_choice' {kind!r} is not supported: use none, auto, required or a function by name",
        param="tool_choice",
        code=UNSUPPORTED,
    )


def _text_config(text: object, chat: JSONObject) -> JSONObject:
    """Map ``text`` (format, verbosity) onto ``chat``; the config the response echoes."""
    if text is None:
        return {"format": {"type": "text"}}
    if not isinstance(text, dict):
        raise BadRequestError("'text' must be an object", param="text")
    for name in text:
        if name not in ("format", "verbosity"):
            raise BadRequestError(f"'text.{name}' is not supported", param=f"text.{name}", code=UNSUPPORTED)
    fmt = text.get("format") or {"type": "text"}
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "json_schema":
        schema = fmt.get("schema")
        if not isinstance(schema, dict):
            raise BadRequestError("'text.format.schema' must be an object", param="text.format.schema")
        spec: JSONObject = {"name": required_str(fmt, "name", "text.format"), "schema": schema}
        for name in ("description", "strict"):
            if fmt.get(name) is not None:
                spec[name] = fmt[name]
        chat["response_format"] = {"type": "json_schema", "json_schema": spec}
    elif kind == "json_object":
        chat["response_format"] = {"type": "json_object"}
    elif kind != "text":
        raise BadRequestError(
            f"'text.format' of type {kind!r} is not supported (text, json_schema, json_object are)",
            param="text.format",
            code=UNSUPPORTED,
        )
    verbosity = text.get("verbosity")
    if verbosity is not None:
        if not isinstance(verbosity, str) or verbosity not in _VERBOSITY:
            raise BadRequestError("'text.verbosity' must be low, medium or high", param="text.verbosity")
        chat["verbosity"] = verbosity
    return {"format": fmt, **({"verbosity": verbosity} if verbosity else {})}


def _reasoning(reasoning: object, chat: JSONObject) -> JSONObject:
    """Map ``reasoning.effort``; ``summary`` asks for summaries of reasoning items, of which the
    gateway returns none (chat answers carry no summaries), so it changes nothing."""
    if reasoning is None:
        return {"effort": None, "summary": None}
    if not isinstance(reasoning, dict):
        raise BadRequestError("'reasoning' must be an object", param="reasoning")
    for name in reasoning:
        if name not in ("effort", "summary", "generate_summary"):
            raise BadRequestError(
                f"'reasoning.{name}' is not supported", param=f"reasoning.{name}", code=UNSUPPORTED
            )
    effort = reasoning.get("effort")
    if effort is not None:
        if not isinstance(effort, str) or effort not in _EFFORTS:
            raise BadRequestError(
                f"'reasoning.effort' {str(effort)[:40]!r} is not a known effort", param="reasoning.effort"
            )
        chat["reasoning_effort"] = effort
    return {"effort": effort, "summary": None}


def _include(include: object) -> bool:
    """Whether output-text logprobs are asked for; unknown includables are refused."""
    if include is None:
        return False
    if not isinstance(include, list):
        raise BadRequestError("'include' must be an array", param="include")
    for value in include:
        if not isinstance(value, str) or (value != _INCLUDABLE_LOGPROBS and value not in _INCLUDABLE_NOOP):
            raise BadRequestError(
                f"'include' value {str(value)[:60]!r} is not supported", param="include", code=UNSUPPORTED
            )
    return _INCLUDABLE_LOGPROBS in include


def _metadata(metadata: object) -> dict[str, str]:
    if metadata is None:
        return {}
    if (
        not isinstance(metadata, dict)
        or len(metadata) > 16
        or not all(isinstance(k, str) and len(k) <= 64 for k in metadata)
        or not all(isinstance(v, str) and len(v) <= 512 for v in metadata.values())
    ):
        raise BadRequestError(
            "'metadata' must be an object of at most 16 string values (keys up to 64, values up to 512 "
            "characters)",
            param="metadata",
        )
    return metadata
