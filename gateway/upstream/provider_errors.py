"""What an upstream said when it refused a request: its machine-readable error, read once.

Contracts: docs/contracts.md#upstream-errors.

An upstream that refuses a request (400, 404, 413, 422) says why in its body. The shapes read
(``read_provider_error``):

* OpenAI and the servers that copy it (llama.cpp, vLLM >= 0.6, Azure OpenAI):
  ``{"error": {"message", "type", "param", "code"}}``. llama.cpp and vLLM put the HTTP status in
  ``code`` (an integer, not a code: dropped); llama.cpp names the fault in ``type``
  (``exceed_context_size_error``), Azure in ``code`` (``content_filter``);
* Anthropic: ``{"type": "error", "error": {"type", "message"}}`` (a ``type``, no ``code``);
* vLLM before 0.6: the same fields at the top level, ``{"object": "error", "message", "type", ...}``;
* ``{"error": "<text>"}``: a message only.

A live stream may carry the same object as an event (``data: {"error": {...}}``, as OpenAI, vLLM
and Azure's content filter send one): ``provider_error_of`` reads it, ``stated_status`` the 4xx it
states (an integer ``code`` or ``status``), since the stream's own status was a 200.

The message is redacted, then cut (``redaction``: a cut must not leave part of a secret behind);
``type``, ``code`` and ``param`` are kept only when they look like identifiers (at most 64
characters of letters, digits and ``_ . - : [ ]``) and survive the same redaction unchanged, so a
client gets the provider's words or nothing, never a secret or free text in a code field.

A content-policy refusal (``is_content_refusal``) is recognised here and nowhere else, by the
provider's ``code`` or ``type`` (``CONTENT_POLICY_CODES``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from redaction import Redactor

# The longest upstream error message relayed to a client.
MESSAGE_CHARS = 300
_IDENTIFIER = re.compile(r"[A-Za-z0-9_.\-:\[\]]{1,64}")
# A provider's safety system refused the prompt (or the answer): OpenAI's
# ``content_policy_violation`` and, on its reasoning models, ``invalid_prompt`` ("your prompt was
# flagged as potentially violating our usage policy"); Azure OpenAI's ``content_filter`` (its
# ``innererror.code`` is ``ResponsibleAIPolicyViolation``). Anthropic's API has no such error: its
# safety refusals are answers (``stop_reason: "refusal"``, a 200), not refused requests.
CONTENT_POLICY_CODES = frozenset({"content_policy_violation", "content_filter", "invalid_prompt"})


@dataclass(frozen=True, slots=True)
class ProviderError:
    """The machine-readable part of an upstream's error body (None: the upstream did not say)."""

    message: str | None = None
    type: str | None = None
    code: str | None = None
    param: str | None = None


def read_provider_error(payload: bytes, redact: Redactor) -> ProviderError:
    """The error an upstream's body carries, in any of the shapes of the module docstring; an
    empty ``ProviderError`` when the body is none of them."""
    try:
        parsed = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return ProviderError()
    return provider_error_of(parsed, redact)


def provider_error_of(parsed: object, redact: Redactor) -> ProviderError:
    """The error of a parsed body or stream event (``read_provider_error``)."""
    if not isinstance(parsed, dict):
        return ProviderError()
    error = parsed.get("error")
    if isinstance(error, dict):
        fields: dict[str, Any] = error
    elif error is not None:
        fields = {"message": error}  # ``{"error": "<text>"}``
    elif parsed.get("object") == "error":
        fields = parsed  # vLLM before 0.6
    else:
        return ProviderError()
    return ProviderError(
        _message(fields.get("message"), redact),
        _identifier(fields.get("type"), redact),
        _identifier(fields.get("code"), redact),
        _identifier(fields.get("param"), redact),
    )


def stated_status(parsed: dict[str, Any]) -> int | None:
    """The client-error status (4xx) a parsed error body or event states in an integer ``code`` or
    ``status`` (llama.cpp, vLLM, Azure), else None."""
    error = parsed.get("error")
    fields = error if isinstance(error, dict) else parsed
    for value in (fields.get("status"), fields.get("code")):
        if isinstance(value, int) and not isinstance(value, bool) and 400 <= value < 500:
            return value
    return None


def is_content_refusal(error: ProviderError | None) -> bool:
    """Whether ``error`` is a provider's content-policy refusal (``CONTENT_POLICY_CODES``)."""
    return error is not None and (error.code in CONTENT_POLICY_CODES or error.type in CONTENT_POLICY_CODES)


def _message(value: object, redact: Redactor) -> str | None:
    """The message, redacted then cut (redacted on a bounded prefix: redaction reads every
    character; a cut at 8x the kept length cannot leave part of a secret inside the part kept)."""
    if not value:
        return None
    return redact(str(value)[: MESSAGE_CHARS * 8])[:MESSAGE_CHARS]


def _identifier(value: object, redact: Redactor) -> str | None:
    """``value`` when it is an identifier-like string that redaction leaves as it is, else None
    (an integer ``code`` is an HTTP status, not a code)."""
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        return None
    return value if redact(value) == value else None
