"""The field checks and chat pieces both translating edges share (Responses and Messages).

A client body is untrusted JSON: its values are ``object`` until a check narrows them, and every
failed check is a ``BadRequestError`` (400) naming the field. The chat pieces are the shapes a
translation writes into the chat body the engine runs.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from gateway.wire.errors import BadRequestError
from gateway.wire.requests import is_int, is_number
from gateway.wire.tool_call_fragments import ChatToolCall

# A client's JSON object, as orjson loaded it (values unchecked).
JSONObject = dict[str, Any]


class ChatMessage(TypedDict, total=False):
    """A chat ``messages[]`` entry as a translation writes it."""

    role: str
    content: str | list[JSONObject] | None
    refusal: str
    tool_calls: list[ChatToolCall]
    tool_call_id: str


class ChatFunctionTool(TypedDict):
    """A chat ``tools[].function``."""

    name: str
    description: NotRequired[str]
    parameters: NotRequired[JSONObject]
    strict: NotRequired[bool]


class ChatTool(TypedDict):
    """A chat ``tools[]`` entry (function tools only)."""

    type: str
    function: ChatFunctionTool


def chat_tool(where: str, name: str, parameters: JSONObject | None, tool: JSONObject) -> ChatTool:
    """A chat function tool named ``name`` with ``parameters``, and the ``description`` and ``strict``
    of the client's ``tool`` (at ``where``) when set (400 when they are not a string and a boolean)."""
    function: ChatFunctionTool = {"name": name}
    description = tool.get("description")
    if description is not None:
        if not isinstance(description, str):
            raise BadRequestError(f"'{where}.description' must be a string", param=f"{where}.description")
        function["description"] = description
    if parameters is not None:
        function["parameters"] = parameters
    strict = tool.get("strict")
    if strict is not None:
        if not isinstance(strict, bool):
            raise BadRequestError(f"'{where}.strict' must be a boolean", param=f"{where}.strict")
        function["strict"] = strict
    return {"type": "function", "function": function}


def chat_tool_call(call_id: str, name: str, arguments: str) -> ChatToolCall:
    """An assistant turn's earlier tool call, as a chat ``tool_calls`` entry."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def chat_tool_choice_function(name: str) -> dict[str, object]:
    """A chat ``tool_choice`` that forces the function ``name``."""
    return {"type": "function", "function": {"name": name}}


def first_choice(chat: JSONObject) -> tuple[JSONObject, JSONObject]:
    """(the first choice, its message) of a complete chat answer; empty objects where it has none."""
    choices = chat.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message")
    return choice, message if isinstance(message, dict) else {}


def sampling_fields(body: JSONObject, chat: JSONObject) -> None:
    """``temperature`` and ``top_p`` copied into ``chat`` when set (400 when not numbers)."""
    for name in ("temperature", "top_p"):
        value = body.get(name)
        if value is not None:
            if not is_number(value):
                raise BadRequestError(f"'{name}' must be a number", param=name)
            chat[name] = value


def required_model(body: JSONObject) -> str:
    """The request's ``model`` (400 unless a non-empty string)."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequestError("'model' is required and must be a non-empty string", param="model")
    return model


def required_str(item: JSONObject, name: str, where: str) -> str:
    """``item[name]`` (at ``where``), which must be a string."""
    value = item.get(name)
    if not isinstance(value, str):
        raise BadRequestError(f"'{where}.{name}' is required and must be a string", param=f"{where}.{name}")
    return value


def optional_str(body: JSONObject, name: str) -> str | None:
    """``body[name]``: None or a string."""
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise BadRequestError(f"'{name}' must be a string", param=name)
    return value


def optional_int(body: JSONObject, name: str, minimum: int, maximum: int | None = None) -> int | None:
    """``body[name]``: None or an integer in ``minimum..maximum``."""
    value = body.get(name)
    if value is None:
        return None
    if not is_int(value) or value < minimum or (maximum and value > maximum):
        bounds = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise BadRequestError(f"'{name}' must be an integer {bounds}", param=name)
    assert isinstance(value, int)
    return value


def optional_bool(body: JSONObject, name: str) -> bool:
    """``body[name]``: a boolean, absent or null meaning false."""
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequestError(f"'{name}' must be a boolean", param=name)
    return value
