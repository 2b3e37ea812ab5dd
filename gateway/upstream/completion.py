"""Reading an upstream's completion: a JSON object with a non-empty list of choice objects, or a
malformed answer (``UpstreamFailure`` ``malformed``), never passed to a client."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

from gateway.upstream.failure import UpstreamFailure

NOT_A_COMPLETION = "response is not a completion JSON object with choices"


def parse_completion(payload: bytes) -> dict[str, Any] | None:
    """An upstream completion as a dict; None unless it is JSON with a non-empty list of choice objects."""
    return completion_of(json_object(payload))


def json_object(payload: bytes) -> dict[str, Any] | None:
    """``payload`` parsed, when it is a JSON object (what an answer's usage can be read from)."""
    try:
        parsed = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def completion_of(parsed: dict[str, Any] | None) -> dict[str, Any] | None:
    """``parsed`` when it is a completion: a JSON object with a non-empty list of choice objects."""
    if parsed is None:
        return None
    choices = parsed.get("choices")
    # ``choices: []`` or non-object choices answer nothing: malformed, never passed to a client.
    if not isinstance(choices, list) or not choices or not all(isinstance(c, dict) for c in choices):
        return None
    return parsed


async def read_completion(response: aiohttp.ClientResponse, model: str) -> dict[str, Any]:
    """Read a whole (non-streamed) completion from an open response; UpstreamFailure if malformed."""
    try:
        payload = await response.read()
    except aiohttp.ClientError as exc:
        raise UpstreamFailure(model, "connect", f"body broke ({type(exc).__name__})") from None
    parsed = parse_completion(payload)
    if parsed is None:
        raise UpstreamFailure(model, "malformed", NOT_A_COMPLETION)
    return parsed
