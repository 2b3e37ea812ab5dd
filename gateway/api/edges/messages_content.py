"""Anthropic Messages content -> chat messages: ``system`` and ``messages`` (docs/apis.md#v1messages).

Text blocks of one message or of ``system`` become one string (blocks are separate paragraphs);
images become ``image_url`` parts; assistant ``tool_use`` blocks become ``tool_calls``; user
``tool_result`` blocks become ``tool`` messages in place, splitting the user turn around them;
a ``system`` message inside ``messages`` (Claude Code sends one) stays a system message in place.
A block of any other type, wherever it is (``system``, a message, a ``tool_result``'s content), is
input the gateway cannot price: a 400 naming where it is (``UnsupportedInputError``,
docs/contracts.md#content-parts).
"""

from __future__ import annotations

import orjson

from gateway.api.edges.fields import ChatMessage, JSONObject, chat_tool_call
from gateway.wire.errors import BadRequestError, UnsupportedInputError
from gateway.wire.tool_call_fragments import ChatToolCall

_BLOCK_EXTRAS = frozenset({"type", "cache_control", "citations"})  # keys every block may carry


def system_messages(system: object) -> list[ChatMessage]:
    """``system`` (a string or text blocks) as a leading system message (none when empty)."""
    if system is None:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}] if system else []
    if not isinstance(system, list):
        raise BadRequestError("'system' must be a string or an array of text blocks", param="system")
    texts = [_system_text(block, f"system[{i}]") for i, block in enumerate(system)]
    return [{"role": "system", "content": _joined(texts)}] if texts else []


def chat_messages(messages: object) -> list[ChatMessage]:
    """``messages`` as chat messages; BadRequestError naming the first block that cannot be sent."""
    if not isinstance(messages, list) or not messages:
        raise BadRequestError("'messages' is required and must be a non-empty array", param="messages")
    out: list[ChatMessage] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise BadRequestError(f"'{where}' must be an object", param=where)
        role, content = message.get("role"), message.get("content")
        if role not in ("user", "assistant", "system"):
            raise BadRequestError(f"'{where}.role' must be user, assistant or system", param=f"{where}.role")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        if not isinstance(content, list):
            raise BadRequestError(
                f"'{where}.content' must be a string or an array of content blocks", param=f"{where}.content"
            )
        if role == "assistant":
            out.append(_assistant(content, where))
        elif role == "system":
            texts = [_system_text(b, f"{where}.content[{i}]") for i, b in enumerate(content)]
            out.append({"role": "system", "content": _joined(texts)})
        else:
            out.extend(_user(content, where))
    return out


def _assistant(blocks: list[object], where: str) -> ChatMessage:
    texts: list[str] = []
    calls: list[ChatToolCall] = []
    for i, item in enumerate(blocks):
        at = f"{where}.content[{i}]"
        kind, block = _block(item, at)
        if kind == "text":
            texts.append(_text_block(block, at))
        elif kind == "tool_use":
            calls.append(_tool_call(block, at))
        elif kind in ("thinking", "redacted_thinking"):
            continue  # earlier turns' thinking is not part of the context (module docstring)
        else:
            raise _unsupported_block(kind, at)
    message: ChatMessage = {"role": "assistant", "content": _joined(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    return message


def _user(blocks: list[object], where: str) -> list[ChatMessage]:
    """Tool results become ``tool`` messages, in order; the other blocks form ``user`` messages."""
    out: list[ChatMessage] = []
    parts: list[JSONObject] = []
    for i, item in enumerate(blocks):
        at = f"{where}.content[{i}]"
        kind, block = _block(item, at)
        if kind == "text":
            parts.append({"type": "text", "text": _text_block(block, at)})
        elif kind == "image":
            parts.append(_image(block, at))
        elif kind == "tool_result":
            if parts:
                out.append(_user_message(parts))
                parts = []
            out.append(_tool_result(block, at))
        else:
            raise _unsupported_block(kind, at)
    if parts or not out:
        out.append(_user_message(parts))
    return out


def _user_message(parts: list[JSONObject]) -> ChatMessage:
    if all(p["type"] == "text" for p in parts):
        return {"role": "user", "content": _joined([p["text"] for p in parts])}
    return {"role": "user", "content": parts}


def _block(block: object, at: str) -> tuple[str, JSONObject]:
    """(its type, the block) of a content block (400 unless an object with a string ``type``)."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise BadRequestError(f"'{at}' must be a content block object with a string 'type'", param=at)
    return block["type"], block


def _unsupported_block(
    kind: str, at: str, takes: str = "text, image, tool_use and tool_result"
) -> BadRequestError:
    return UnsupportedInputError(
        f"content block type {kind!r} at '{at}' is not taken by this gateway's /v1/messages "
        f"(unsupported_input): it takes {takes} blocks there, the input it can price "
        "(docs/apis.md#content-parts)",
        param=at,
    )


def _system_text(block: object, at: str) -> str:
    """The text of a block of ``system`` (text only: a block of another type is refused as input)."""
    kind = _block(block, at)[0]
    if kind != "text":
        raise _unsupported_block(kind, at, "only text")
    return _text_block(block, at)


def _text_block(block: object, at: str) -> str:
    if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
        raise BadRequestError(f"'{at}' must be a text block with a string 'text'", param=at)
    no_extra_keys(block, {"text"} | _BLOCK_EXTRAS, at)
    text: str = block["text"]
    return text


def _image(block: JSONObject, at: str) -> JSONObject:
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "base64" and isinstance(source, dict):
        media, data = source.get("media_type"), source.get("data")
        if isinstance(media, str) and isinstance(data, str):
            return {"type": "image_url", "image_url": {"url": f"data:{media};base64,{data}"}}
    elif kind == "url" and isinstance(source, dict) and isinstance(source.get("url"), str):
        return {"type": "image_url", "image_url": {"url": source["url"]}}
    raise BadRequestError(
        f"'{at}.source' must be a base64 image (media_type, data) or a URL image; file sources are not "
        "supported (the gateway has no Files API)",
        param=f"{at}.source",
    )


def _tool_call(block: JSONObject, at: str) -> ChatToolCall:
    call_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, dict):
        raise BadRequestError(
            f"'{at}' must be a tool_use block with string 'id' and 'name' and an object 'input'", param=at
        )
    no_extra_keys(block, {"id", "name", "input", "caller"} | _BLOCK_EXTRAS, at)
    return chat_tool_call(call_id, name, orjson.dumps(arguments).decode())


def _tool_result(block: JSONObject, at: str) -> ChatMessage:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise BadRequestError(f"'{at}.tool_use_id' must be a string", param=f"{at}.tool_use_id")
    no_extra_keys(block, {"tool_use_id", "content", "is_error"} | _BLOCK_EXTRAS, at)
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            inner = f"{at}.content[{i}]"
            kind = _block(part, inner)[0]
            if kind != "text":  # chat tool messages are text
                raise _unsupported_block(kind, inner, "only text")
            texts.append(_text_block(part, inner))
        text = _joined(texts)
    else:
        raise BadRequestError(
            f"'{at}.content' must be a string or an array of text blocks", param=f"{at}.content"
        )
    is_error = block.get("is_error")
    if is_error is not None and not isinstance(is_error, bool):
        raise BadRequestError(f"'{at}.is_error' must be a boolean", param=f"{at}.is_error")
    if is_error:
        text = f"Error: {text}"  # chat tool messages have no error flag: it is stated in the text
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def no_extra_keys(block: JSONObject, allowed: frozenset[str] | set[str], at: str) -> None:
    """BadRequestError naming the first key of ``block`` (at ``at``) that is not ``allowed``."""
    for key in block:
        if key not in allowed:
            raise BadRequestError(
                f"'{at}.{key}' is not supported by this gateway's /v1/messages", param=f"{at}.{key}"
            )


def _joined(texts: list[str]) -> str:
    """Text blocks as one string: blocks are separate paragraphs to the model, as to a reader."""
    return "\n\n".join(texts)
