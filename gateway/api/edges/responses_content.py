"""Responses ``input`` -> chat messages (docs/apis.md#responses).

A string is one user message. Items: a ``message`` (roles user, assistant, system, developer; text,
refusal and ``input_image`` URL parts) becomes a chat message, its text parts one string unless it
carries images; consecutive ``function_call`` items (and the assistant text before them) become one
assistant turn's ``tool_calls``; a ``function_call_output`` becomes a ``tool`` message (its text).
Item references and reasoning items need stored responses and are refused (``unsupported_parameter``);
an item or content part of any other type is input the gateway cannot price and is refused as such
(``unsupported_input``, docs/contracts.md#content-parts), wherever it is.
"""

from __future__ import annotations

from gateway.api.edges.fields import ChatMessage, JSONObject, chat_tool_call, required_str
from gateway.wire.errors import BadRequestError, UnsupportedInputError

UNSUPPORTED = "unsupported_parameter"

_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TEXT_PARTS = ("input_text", "output_text", "text")


def input_messages(items: object) -> list[ChatMessage]:
    """Chat messages of a Responses ``input``: a string (one user message) or a list of items."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise BadRequestError("'input' is required: a string or a non-empty array of items", param="input")
    turns: list[ChatMessage] = []
    open_turn = False  # whether the last turn is assistant text that a function call joins
    for index, item in enumerate(items):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise BadRequestError(f"'{where}' must be an object", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            turn = _message(item, where)
            turns.append(turn)
            open_turn = turn["role"] == "assistant"
        elif kind == "function_call":
            call_id = required_str(item, "call_id", where)
            name, arguments = required_str(item, "name", where), required_str(item, "arguments", where)
            call = chat_tool_call(call_id, name, arguments)
            # Consecutive calls (and the text before them) are one assistant turn in chat.
            if open_turn:
                turns[-1].setdefault("tool_calls", []).append(call)
            else:
                turns.append({"role": "assistant", "content": None, "tool_calls": [call]})
                open_turn = True
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _tool_output(output, where)
            call_id = required_str(item, "call_id", where)
            turns.append({"role": "tool", "tool_call_id": call_id, "content": text})
            open_turn = False
        else:
            raise _unsupported_item(kind, where)
    return turns


def _unsupported_item(kind: object, where: str) -> BadRequestError:
    if kind == "item_reference":
        reason = "item references need stored responses, which the gateway does not keep"
    elif kind == "reasoning":
        reason = "reasoning items are not supported (this gateway returns none)"
    else:
        return UnsupportedInputError(
            f"'{where}': input items of type '{kind}' are not taken (message, function_call and "
            "function_call_output are: docs/apis.md#content-parts)",
            param=where,
        )
    return BadRequestError(f"'{where}': {reason}", param=where, code=UNSUPPORTED)


def _message(item: JSONObject, where: str) -> ChatMessage:
    role = _ROLES.get(item["role"]) if isinstance(item.get("role"), str) else None
    if role is None:
        raise BadRequestError(
            f"'{where}.role' must be one of user, assistant, system, developer", param=f"{where}.role"
        )
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list) or (not content and role != "assistant"):
        raise BadRequestError(
            f"'{where}.content' must be a string or a non-empty array", param=f"{where}.content"
        )
    parts: list[JSONObject] = []
    refusals: list[str] = []
    for number, part in enumerate(content):
        at = f"{where}.content[{number}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS:
            parts.append({"type": "text", "text": required_str(part, "text", at)})
        elif kind == "refusal" and role == "assistant":
            refusals.append(required_str(part, "refusal", at))
        elif kind == "input_image" and role == "user":
            parts.append(_image(part, at))
        else:
            raise UnsupportedInputError(
                f"'{at}': content parts of type '{kind}' are not taken in a {item.get('role')} message "
                "(docs/apis.md#content-parts)",
                param=at,
            )
    message: ChatMessage = {"role": role}
    if role == "assistant" or all(p["type"] == "text" for p in parts):
        # Chat assistant (and most system) turns take text; parts of one turn are one text.
        message["content"] = "".join(p["text"] for p in parts if p["type"] == "text") if parts else None
    else:
        message["content"] = parts
    if refusals:
        message["refusal"] = "".join(refusals)
    return message


def _image(part: JSONObject, at: str) -> JSONObject:
    url = part.get("image_url")
    if not isinstance(url, str) or part.get("file_id"):
        raise UnsupportedInputError(
            f"'{at}': images are accepted as 'image_url' only (file ids need the Files API)", param=at
        )
    image: JSONObject = {"url": url}
    if part.get("detail") is not None:
        image["detail"] = part["detail"]
    return {"type": "image_url", "image_url": image}


def _tool_output(output: object, where: str) -> str:
    """A function call's output given as content parts: its text (chat tool results are text)."""
    if not isinstance(output, list):
        raise BadRequestError(
            f"'{where}.output' must be a string or an array of input_text parts", param=f"{where}.output"
        )
    for number, part in enumerate(output):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in _TEXT_PARTS:
            at = f"{where}.output[{number}]"
            raise UnsupportedInputError(
                f"'{at}': content parts of type '{kind}' are not taken in a function call's output "
                "(a chat tool result is text: docs/apis.md#content-parts)",
                param=at,
            )
    return "".join(required_str(p, "text", f"{where}.output") for p in output)
