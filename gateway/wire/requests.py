"""Client request parsing and validation, by hand on an orjson dict (no pydantic on the hot path).

Only the fields the gateway acts on are checked; every other field (temperature, tools,
response_format, stop, seed, user, ...) is forwarded to the upstream untouched, and the upstream
remains the judge of those. Every problem is a ``BadRequestError`` (400) naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeGuard

import orjson

from gateway.wire.errors import BadRequestError
from money.usage import positive_int
from policies.client_schemas import schema_problem
from policies.schema_limits import SchemaAllowance

# Which OpenAI completion API a request is on, and so the upstream endpoint it is forwarded to:
# ``chat`` (/v1/chat/completions; every other edge translates into it) or ``completions`` (the
# legacy /v1/completions). Not the request *kind* of a policy (``policies.tool_calls.RequestKind``:
# text, tool_call, structured_output), which is read from a chat body's content.
CompletionApi = Literal["chat", "completions"]

# Fields whose type the gateway checks because a wrong type would otherwise surface as an upstream
# error far from its cause. Value: accepted Python types (bool is excluded from numbers below).
_NUMBER_FIELDS = ("temperature", "top_p", "presence_penalty", "frequency_penalty")
_INT_FIELDS = ("max_tokens", "max_completion_tokens", "seed")

# orjson parses 1,024 levels of nested arrays/objects but serializes only this many, so a deeper
# body would parse and then fail when it is forwarded. No real request nests anywhere near it
# (tool schemas and multimodal content stay below 20).
MAX_JSON_DEPTH = 254
TOO_DEEP = f"request body nests arrays/objects deeper than {MAX_JSON_DEPTH} levels"


@dataclass(slots=True)
class ParsedRequest:
    """A validated client request.

    Attributes:
        api: ``chat`` (/v1/chat/completions) or ``completions`` (/v1/completions).
        body: the client's JSON object, forwarded with only ``model`` (and logprob fields) changed.
        model: the ``model`` the client asked for (a cascade alias or a configured model name).
        stream: whether the client wants SSE.
        n: number of choices asked for (default 1).
        wants_logprobs: whether the client asked for logprobs (they are stripped otherwise).
        include_usage: ``stream_options.include_usage`` (streams only).
    """

    api: CompletionApi
    body: dict[str, Any]
    model: str
    stream: bool
    n: int
    wants_logprobs: bool
    include_usage: bool


def parse_request(raw: bytes, api: CompletionApi) -> ParsedRequest:
    """Parse and validate a request body; BadRequestError (400) on any problem."""
    body = load_json_object(raw)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequestError("'model' is required and must be a non-empty string", param="model")

    if api == "chat":
        _check_messages(body.get("messages"))
        wants_logprobs = optional_bool(body, "logprobs")
        top = body.get("top_logprobs")
        if top is not None and (not is_int(top) or not 0 <= top <= 20):
            raise BadRequestError("'top_logprobs' must be an integer in 0..20", param="top_logprobs")
    else:
        _check_prompt(body.get("prompt"))
        logprobs = body.get("logprobs")
        if logprobs is not None and (not is_int(logprobs) or not 0 <= logprobs <= 20):
            raise BadRequestError("'logprobs' must be an integer in 0..20 or null", param="logprobs")
        wants_logprobs = logprobs is not None

    stream = optional_bool(body, "stream")
    n = body.get("n")
    n = 1 if n is None else positive_int(n)
    if not n:
        raise BadRequestError("'n' must be a positive integer", param="n")
    for name in _NUMBER_FIELDS:
        value = body.get(name)
        if value is not None and not is_number(value):
            raise BadRequestError(f"'{name}' must be a number", param=name)
    for name in _INT_FIELDS:
        value = body.get(name)
        if value is not None and not is_int(value):
            raise BadRequestError(f"'{name}' must be an integer", param=name)

    include_usage = False
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise BadRequestError("'stream_options' must be an object", param="stream_options")
        include_usage = optional_bool(options, "include_usage")
    return ParsedRequest(api, body, model, stream, n, wants_logprobs, include_usage)


def load_json_object(raw: bytes) -> dict[str, Any]:
    """A client body as a JSON object: every API's one loader (BadRequestError, 400, when it is
    empty, not JSON, not an object, or nested deeper than it could be forwarded)."""
    if not raw:
        raise BadRequestError("request body is empty; expected a JSON object")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequestError(f"request body is not valid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise BadRequestError("request body must be a JSON object")
    # A body cannot nest deeper than it has brackets, so almost every body skips the check
    # (bytes.count runs at memory speed); the others are re-encoded once, in C, to find out.
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and not _encodable(body):
        raise BadRequestError(TOO_DEEP)
    return body


def encoded_size(body: dict[str, Any]) -> int:
    """Bytes of ``body`` as JSON (what is forwarded); BadRequestError (400) when a translation nested
    it deeper than it can be written."""
    try:
        return len(orjson.dumps(body))
    except orjson.JSONEncodeError:
        raise BadRequestError(TOO_DEEP) from None


def check_client_schemas(body: dict[str, Any]) -> None:
    """BadRequestError (400, code ``invalid_schema``) for a JSON Schema of the chat ``body`` (tool
    ``parameters``, legacy ``functions``, ``response_format``) that reaches outside itself, loops
    through its refs, has a pattern that cannot run in linear time, declares a draft the gateway
    does not run, or passes the limits the request's schemas share (``policies.client_schemas``,
    ``policies.schema_limits``).

    Called only for a body that has ``tools``, ``functions`` or ``response_format``."""
    allowance = SchemaAllowance()
    for where, schema in _client_schemas(body):
        problem = schema_problem(schema, allowance)
        if problem is not None:
            raise BadRequestError(f"'{where}': {problem}", param=where, code="invalid_schema")


def _client_schemas(body: dict[str, Any]) -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    tools = body.get("tools")
    for index, tool in enumerate(tools if isinstance(tools, list) else ()):
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and "parameters" in function:
            found.append((f"tools[{index}].function.parameters", function["parameters"]))
    functions = body.get("functions")
    for index, function in enumerate(functions if isinstance(functions, list) else ()):
        if isinstance(function, dict) and "parameters" in function:
            found.append((f"functions[{index}].parameters", function["parameters"]))
    response_format = body.get("response_format")
    spec = response_format.get("json_schema") if isinstance(response_format, dict) else None
    if isinstance(spec, dict) and "schema" in spec:
        found.append(("response_format.json_schema.schema", spec["schema"]))
    return found


def _encodable(document: Any) -> bool:
    """Whether orjson can write ``document`` again (it cannot past MAX_JSON_DEPTH levels)."""
    try:
        orjson.dumps(document)
    except orjson.JSONEncodeError:
        return False
    return True


def is_int(value: object) -> TypeGuard[int]:
    """Whether a JSON value is an integer (a JSON bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    """Whether a JSON value is a number (a JSON bool is not one)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def optional_bool(body: dict[str, Any], name: str) -> bool:
    """``body[name]``: a boolean, absent or null meaning false (400 naming the field otherwise)."""
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequestError(f"'{name}' must be a boolean", param=name)
    return value


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise BadRequestError("'messages' is required and must be a non-empty array", param="messages")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequestError(
                f"'messages[{index}]' must be an object with a string 'role'", param=f"messages[{index}]"
            )


def _check_prompt(prompt: Any) -> None:
    if isinstance(prompt, str):
        return
    if isinstance(prompt, list) and prompt and all(isinstance(p, str | int) for p in prompt):
        return
    if isinstance(prompt, list) and prompt and all(isinstance(p, list) for p in prompt):
        return
    raise BadRequestError(
        "'prompt' is required and must be a string, an array of strings or token arrays", param="prompt"
    )
