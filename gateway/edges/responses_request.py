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
from typing import Any

import orjson

from gateway.errors import BadRequestError
from gateway.requests import MAX_JSON_DEPTH, ParsedRequest

UNSUPPORTED = "unsupported_parameter"

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
# Accepted only when null/false/empty, with the reason any other value is refused.
_STATEFUL = {
    "previous_response_id": "the gateway keeps no responses; send the whole conversation in 'input'",
    "conversation": "the gateway keeps no conversations; send the whole conversation in 'input'",
    "background": "background responses need stored responses, which the gateway does not keep",
    "prompt": "stored prompt templates are not available; send the text in 'instructions' and 'input'",
    "context_management": "server-side context compaction is not available",
    "moderation": "moderation is not available on this gateway",
}
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
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TEXT_PARTS = ("input_text", "output_text", "text")
_EFFORTS = frozenset({"none", "minimal", "low", "medium", "high", "xhigh"})
_VERBOSITY = frozenset({"low", "medium", "high"})


@dataclass(slots=True)
class ResponsesRequest:
    """What the answer echoes and how it is shaped (the edge's context)."""

    response_id: str
    created_at: int
    model: str
    instructions: str | None
    tools: list[Any]
    tool_choice: Any
    parallel_tool_calls: bool
    temperature: float | None
    top_p: float | None
    max_output_tokens: int | None
    top_logprobs: int | None
    text: dict[str, Any]
    reasoning: dict[str, Any]
    metadata: dict[str, str]
    wants_logprobs: bool
    echo: dict[str, Any] = field(default_factory=dict)  # accepted hints, as the response reports them


def translate_responses(raw: bytes, request_id: str, now: int) -> tuple[ParsedRequest, ResponsesRequest, int]:
    """(the chat request, the context, the chat body's size in bytes); BadRequestError on any problem."""
    body = _load(raw)
    _refuse_unsupported_fields(body)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequestError("'model' is required and must be a non-empty string", param="model")
    _refuse_storage_and_truncation(body)
    stream = _bool(body, "stream")
    instructions = _optional_str(body, "instructions")
    messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []
    messages.extend(input_messages(body.get("input")))
    chat: dict[str, Any] = {"model": model, "messages": messages}
    tools, tool_choice, parallel = _tool_fields(body, chat)
    for name in ("temperature", "top_p"):
        value = body.get(name)
        if value is not None:
            if not _is_number(value):
                raise BadRequestError(f"'{name}' must be a number", param=name)
            chat[name] = value
    cap = _optional_int(body, "max_output_tokens", minimum=1)
    if cap is not None:
        chat["max_tokens"] = cap
    text = _text_config(body.get("text"), chat)
    reasoning = _reasoning(body.get("reasoning"), chat)
    wants_logprobs = _include(body.get("include"))
    top_logprobs = _optional_int(body, "top_logprobs", minimum=0, maximum=20)
    if wants_logprobs:
        chat["logprobs"] = True
        chat["top_logprobs"] = top_logprobs or 0
    if stream:
        chat["stream"] = True
    metadata = _metadata(body.get("metadata"))
    echo = {name: body.get(name) for name in ("prompt_cache_key", "safety_identifier", "user")}
    echo["max_tool_calls"] = body.get("max_tool_calls")
    context = ResponsesRequest(
        response_id=f"resp_{request_id}",
        created_at=now,
        model=model,
        instructions=instructions,
        tools=tools or [],
        tool_choice=tool_choice if tool_choice is not None else "auto",
        parallel_tool_calls=parallel if parallel is not None else True,
        temperature=body.get("temperature"),
        top_p=body.get("top_p"),
        max_output_tokens=cap,
        top_logprobs=top_logprobs,
        text=text,
        reasoning=reasoning,
        metadata=metadata,
        wants_logprobs=wants_logprobs,
        echo=echo,
    )
    sent = orjson.dumps(chat)
    # Streams ask for usage: the closing event reports it (the upstream is asked for it anyway).
    parsed = ParsedRequest("chat", chat, model, stream, 1, wants_logprobs, include_usage=stream)
    return parsed, context, len(sent)


def _refuse_unsupported_fields(body: dict[str, Any]) -> None:
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


def _refuse_storage_and_truncation(body: dict[str, Any]) -> None:
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


def _tool_fields(body: dict[str, Any], chat: dict[str, Any]) -> tuple[Any, Any, Any]:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls`` as given (checked), set in ``chat``
    translated (parallel_tool_calls only alongside tools)."""
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise BadRequestError("'tools' must be an array", param="tools")
        if tools:
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


def _load(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise BadRequestError("request body is empty; expected a JSON object")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequestError(f"request body is not valid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise BadRequestError("request body must be a JSON object")
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH:
        try:
            orjson.dumps(body)
        except orjson.JSONEncodeError:
            raise BadRequestError(
                f"request body nests arrays/objects deeper than {MAX_JSON_DEPTH} levels"
            ) from None
    return body


def input_messages(items: Any) -> list[dict[str, Any]]:
    """Chat messages of a Responses ``input``: a string (one user message) or a list of items."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise BadRequestError("'input' is required: a string or a non-empty array of items", param="input")
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise BadRequestError(f"'{where}' must be an object", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message(item, where))
        elif kind == "function_call":
            call = {
                "id": _required_str(item, "call_id", where),
                "type": "function",
                "function": {
                    "name": _required_str(item, "name", where),
                    "arguments": _required_str(item, "arguments", where),
                },
            }
            last = messages[-1] if messages else None
            # Consecutive calls (and the text before them) are one assistant turn in chat.
            if last is not None and last["role"] == "assistant" and not last.get("_closed"):
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": _required_str(item, "call_id", where),
                    "content": output if isinstance(output, str) else _tool_output(output, where),
                }
            )
        elif kind == "item_reference":
            raise BadRequestError(
                f"'{where}': item references need stored responses, which the gateway does not keep",
                param=where,
                code=UNSUPPORTED,
            )
        elif kind == "reasoning":
            raise BadRequestError(
                f"'{where}': reasoning items are not supported (this gateway returns none)",
                param=where,
                code=UNSUPPORTED,
            )
        else:
            raise BadRequestError(
                f"'{where}': input items of type '{kind}' are not supported (messages, function_call "
                "and function_call_output are)",
                param=where,
                code=UNSUPPORTED,
            )
    for message in messages:
        message.pop("_closed", None)
    return messages


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = _ROLES.get(item["role"]) if isinstance(item.get("role"), str) else None
    if role is None:
        raise BadRequestError(
            f"'{where}.role' must be one of user, assistant, system, developer", param=f"{where}.role"
        )
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content, "_closed": role != "assistant"}
    if not isinstance(content, list) or (not content and role != "assistant"):
        raise BadRequestError(
            f"'{where}.content' must be a string or a non-empty array", param=f"{where}.content"
        )
    parts: list[dict[str, Any]] = []
    refusals: list[str] = []
    for number, part in enumerate(content):
        at = f"{where}.content[{number}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS:
            parts.append({"type": "text", "text": _required_str(part, "text", at)})
        elif kind == "refusal" and role == "assistant":
            refusals.append(_required_str(part, "refusal", at))
        elif kind == "input_image" and role == "user":
            url = part.get("image_url")
            if not isinstance(url, str) or part.get("file_id"):
                raise BadRequestError(
                    f"'{at}': images are accepted as 'image_url' only (file ids need the Files API)",
                    param=at,
                    code=UNSUPPORTED,
                )
            image: dict[str, Any] = {"url": url}
            if part.get("detail") is not None:
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise BadRequestError(
                f"'{at}': content parts of type '{kind}' are not supported in a {item.get('role')} message",
                param=at,
                code=UNSUPPORTED,
            )
    message: dict[str, Any] = {"role": role, "_closed": role != "assistant"}
    if role == "assistant" or all(p["type"] == "text" for p in parts):
        # Chat assistant (and most system) turns take text; parts of one turn are one text.
        message["content"] = "".join(p["text"] for p in parts if p["type"] == "text") if parts else None
    else:
        message["content"] = parts
    if refusals:
        message["refusal"] = "".join(refusals)
    return message


def _tool_output(output: Any, where: str) -> str:
    """A function call's output given as content parts: its text (chat tool results are text)."""
    if isinstance(output, list) and all(isinstance(p, dict) and p.get("type") in _TEXT_PARTS for p in output):
        return "".join(_required_str(p, "text", f"{where}.output") for p in output)
    raise BadRequestError(
        f"'{where}.output' must be a string or an array of input_text parts (a chat tool result is text)",
        param=f"{where}.output",
        code=UNSUPPORTED,
    )


def _chat_tool(tool: Any, index: int) -> dict[str, Any]:
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
    function: dict[str, Any] = {"name": _required_str(tool, "name", where)}
    description = tool.get("description")
    if description is not None:
        function["description"] = description
    parameters = tool.get("parameters")
    if parameters is not None:
        if not isinstance(parameters, dict):
            raise BadRequestError(f"'{where}.parameters' must be an object", param=f"{where}.parameters")
        function["parameters"] = parameters
    strict = tool.get("strict")
    if strict is not None:
        function["strict"] = strict
    return {"type": "function", "function": function}


def _chat_tool_choice(choice: Any) -> Any:
    if choice in ("none", "auto", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    kind = choice.get("type") if isinstance(choice, dict) else choice
    raise BadRequestError(
        f"'tool_choice' {kind!r} is not supported: use none, auto, required or a function by name",
        param="tool_choice",
        code=UNSUPPORTED,
    )


def _text_config(text: Any, chat: dict[str, Any]) -> dict[str, Any]:
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
        spec: dict[str, Any] = {"name": _required_str(fmt, "name", "text.format"), "schema": schema}
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


def _reasoning(reasoning: Any, chat: dict[str, Any]) -> dict[str, Any]:
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


def _include(include: Any) -> bool:
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


def _metadata(metadata: Any) -> dict[str, str]:
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


def _required_str(item: dict[str, Any], name: str, where: str) -> str:
    value = item.get(name)
    if not isinstance(value, str):
        raise BadRequestError(f"'{where}.{name}' is required and must be a string", param=f"{where}.{name}")
    return value


def _optional_str(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise BadRequestError(f"'{name}' must be a string", param=name)
    return value


def _optional_int(body: dict[str, Any], name: str, minimum: int, maximum: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or value < minimum
        or (maximum and value > maximum)
    ):
        bounds = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise BadRequestError(f"'{name}' must be an integer {bounds}", param=name)
    return value


def _bool(body: dict[str, Any], name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequestError(f"'{name}' must be a boolean", param=name)
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
