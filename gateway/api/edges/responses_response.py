"""The shapes of a Responses API answer, built from a chat answer.

``render_response``: the chat message becomes output items (a ``message`` with ``output_text`` and
``refusal`` parts, then one ``function_call`` item per tool call), ``finish_reason: length`` an
``incomplete`` response (``max_output_tokens``), chat usage the Responses usage; the Response
object echoes the request's settings (gateway.api.edges.responses_request) and is never stored
(``store: false``).
"""

from __future__ import annotations

from typing import TypedDict

from gateway.api.edges.fields import JSONObject, first_choice
from gateway.api.edges.responses_request import ResponsesRequest
from money.usage import positive_int


class ResponseUsage(TypedDict):
    """A Response's ``usage``."""

    input_tokens: int
    input_tokens_details: dict[str, int]
    output_tokens: int
    output_tokens_details: dict[str, int]
    total_tokens: int


def render_response(chat: JSONObject, context: ResponsesRequest, model_name: str | None = None) -> JSONObject:
    """A complete chat answer (its first choice) as a Response object; ``model`` is ``model_name``
    when given, else the answer's (else the request's)."""
    choice, message = first_choice(chat)
    status, incomplete = completion_status(choice.get("finish_reason"))
    return response_object(
        context,
        status=status,
        model=model_name or chat.get("model") or context.model,
        output=output_items(message, choice.get("logprobs"), context, status),
        usage=response_usage(chat.get("usage")),
        incomplete_details=incomplete,
    )


def completion_status(finish_reason: object) -> tuple[str, dict[str, str] | None]:
    """The response status (and ``incomplete_details``) of a chat ``finish_reason``."""
    if finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if finish_reason == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def output_items(
    message: JSONObject, logprobs: object, context: ResponsesRequest, status: str
) -> list[JSONObject]:
    """The output items of a chat answer's ``message``: its text (and refusal), then its tool calls."""
    items: list[JSONObject] = []
    content: list[JSONObject] = []
    text = message.get("content")
    if isinstance(text, str) and text:
        content.append(output_text(text, text_logprobs(logprobs) if context.wants_logprobs else []))
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        content.append({"type": "refusal", "refusal": refusal})
    if content:
        items.append(
            {
                "type": "message",
                "id": message_id(context),
                "status": status,
                "role": "assistant",
                "content": content,
            }
        )
    calls = message.get("tool_calls")
    for index, call in enumerate(calls if isinstance(calls, list) else ()):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        items.append(
            function_call_item(
                context,
                index,
                call.get("id"),
                function.get("name") or "",
                function.get("arguments") or "",
                "completed",
            )
        )
    return items


def output_text(text: str, logprobs: list[JSONObject]) -> JSONObject:
    """An ``output_text`` content part."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}


def message_id(context: ResponsesRequest) -> str:
    """The id of the response's message item."""
    return "msg_" + context.response_id[5:]


def function_call_item(
    context: ResponsesRequest, index: int, call_id: object, name: str, arguments: str, status: str
) -> JSONObject:
    """A ``function_call`` output item (the upstream's call id, or one made up if it sent none)."""
    suffix = f"{context.response_id[5:]}_{index}"
    return {
        "type": "function_call",
        "id": f"fc_{suffix}",
        "call_id": call_id if isinstance(call_id, str) and call_id else f"call_{suffix}",
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def text_logprobs(logprobs: object) -> list[JSONObject]:
    """Chat ``logprobs.content`` entries as Responses logprobs."""
    entries = logprobs.get("content") if isinstance(logprobs, dict) else None
    out = []
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict):
            continue
        tops = entry.get("top_logprobs")
        out.append(
            {
                "token": entry.get("token") or "",
                "logprob": entry.get("logprob") if entry.get("logprob") is not None else 0.0,
                "bytes": entry.get("bytes") or [],
                "top_logprobs": [
                    {
                        "token": t.get("token") or "",
                        "logprob": t.get("logprob"),
                        "bytes": t.get("bytes") or [],
                    }
                    for t in (tops if isinstance(tops, list) else ())
                    if isinstance(t, dict)
                ],
            }
        )
    return out


def response_usage(usage: object) -> ResponseUsage | None:
    """Chat usage in the Responses form (None when the upstream reported none)."""
    if not isinstance(usage, dict):
        return None
    prompt = positive_int(usage.get("prompt_tokens"))
    completion = positive_int(usage.get("completion_tokens"))
    prompt_details = usage.get("prompt_tokens_details")
    completion_details = usage.get("completion_tokens_details")
    cached = positive_int(prompt_details.get("cached_tokens")) if isinstance(prompt_details, dict) else 0
    reasoning = (
        positive_int(completion_details.get("reasoning_tokens"))
        if isinstance(completion_details, dict)
        else 0
    )
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": positive_int(usage.get("total_tokens")) or prompt + completion,
    }


def response_object(
    context: ResponsesRequest,
    *,
    status: str,
    model: str,
    output: list[JSONObject],
    usage: ResponseUsage | None = None,
    incomplete_details: dict[str, str] | None = None,
    error: dict[str, str] | None = None,
) -> JSONObject:
    """A Response object: the request's echoed settings around ``output`` and ``usage``."""
    # A copy of the template with its per-request values set: building the 30-key dict afresh
    # (two literal halves merged, growing it twice) costs three times as much (docs/benchmarks.md).
    response = _RESPONSE_TEMPLATE.copy()
    response["id"] = context.response_id
    response["created_at"] = context.created_at
    response["status"] = status
    response["error"] = error
    response["incomplete_details"] = incomplete_details
    response["instructions"] = context.instructions
    response["max_output_tokens"] = context.max_output_tokens
    echo = context.echo
    if echo:
        for name in ("max_tool_calls", "prompt_cache_key", "safety_identifier", "user"):
            response[name] = echo.get(name)
    response["model"] = model
    response["output"] = output
    response["parallel_tool_calls"] = context.parallel_tool_calls
    response["reasoning"] = context.reasoning
    response["temperature"] = context.temperature
    response["text"] = context.text
    response["tool_choice"] = context.tool_choice
    response["tools"] = context.tools
    response["top_logprobs"] = context.top_logprobs
    response["top_p"] = context.top_p
    response["usage"] = usage
    response["metadata"] = context.metadata
    return response


# Every key of a Response object in its order, with the values no request changes.
_RESPONSE_TEMPLATE: JSONObject = {
    "id": "",
    "object": "response",
    "created_at": 0,
    "status": "",
    "background": False,
    "error": None,
    "incomplete_details": None,
    "instructions": None,
    "max_output_tokens": None,
    "max_tool_calls": None,
    "model": "",
    "output": None,
    "parallel_tool_calls": True,
    "previous_response_id": None,
    "prompt_cache_key": None,
    "reasoning": None,
    "safety_identifier": None,
    "service_tier": "default",
    "store": False,
    "temperature": None,
    "text": None,
    "tool_choice": "auto",
    "tools": None,
    "top_logprobs": None,
    "top_p": None,
    "truncation": "disabled",
    "usage": None,
    "user": None,
    "metadata": None,
}
