"""Per-model request defaults: fields a pool member adds to every request it is sent.

One upstream model can appear as several pool members (e.g. a *fast* member that answers in a few
tokens and a *reasoning* member that thinks step by step) that differ only in how they are asked.
The gateway config (``models.NAME.request_defaults``) and ``cascade collect`` targets share this
definition and this merge, so what calibration measured is what the gateway sends.

Precedence, from lowest to highest (``merge_request_defaults``):

1. the member's default fields (``max_tokens``, ``temperature``, ``reasoning_effort``, any other
   top-level field of the upstream API);
2. the client's own fields: a field present in the client's body wins over its default. The
   completion cap's spellings (``money.charges.COMPLETION_CAP_FIELDS``: ``max_tokens``,
   ``max_completion_tokens``, ``n_predict``) are one setting: a client that sends any of them
   replaces every default cap;
3. what the gateway itself controls, always: ``model`` (the upstream id), ``stream`` and
   ``stream_options``, and ``logprobs``/``top_logprobs`` on scored stages. These, ``n``,
   ``messages`` and ``prompt`` cannot be defaults (a config naming one is refused).

``system`` is a default system message (chat requests only): it is put first in ``messages`` unless
the client's messages already contain a ``system`` or ``developer`` message, which then wins.
Legacy ``/v1/completions`` requests get the default fields but no system message.

Only the contract package's dependencies (pydantic, orjson) are used: the gateway and collection import it.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator

from money.charges import COMPLETION_CAP_FIELDS, TEMPLATE_FIELDS
from money.usage import positive_int

# Fields the gateway or the client's request shape owns; a default for one would be ignored or wrong.
RESERVED_FIELDS = frozenset(
    {"model", "messages", "prompt", "stream", "stream_options", "logprobs", "top_logprobs", "n"}
)
_SYSTEM_ROLES = frozenset({"system", "developer"})
# Tokens a chat template wraps one message in (e.g. "<|im_start|>system\n ... <|im_end|>\n"), generously.
_ROLE_MARKER_BYTES = 32


class RequestDefaults(BaseModel):
    """Default request fields of one pool member (``system`` + any top-level API field)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    system: str | None = Field(
        None, min_length=1, description="system message used when the client's messages have none"
    )

    @model_validator(mode="after")
    def _no_reserved_fields(self) -> RequestDefaults:
        reserved = sorted(RESERVED_FIELDS & set(self.fields()))
        if reserved:
            raise ValueError(
                f"request_defaults cannot set {', '.join(reserved)} (the client or the gateway owns them)"
            )
        return self

    def fields(self) -> dict[str, Any]:
        """The default top-level fields (everything but ``system``)."""
        return dict(self.model_extra or {})

    def completion_cap(self) -> int | None:
        """The default completion-token cap, if the defaults set one."""
        fields = self.fields()
        return next((cap for name in COMPLETION_CAP_FIELDS if (cap := positive_int(fields.get(name)))), None)

    def prompt_bytes(self) -> int:
        """Bytes the defaults may add to a request's prompt, for cost bounds: the system message
        (plus room for the chat template's role markers) and the JSON of default fields a template
        puts in the prompt (``tools``, ``functions``, ``response_format``).
        """
        added = len(self.system.encode()) + _ROLE_MARKER_BYTES if self.system else 0
        fields = self.fields()
        return added + sum(len(orjson.dumps(fields[name])) for name in TEMPLATE_FIELDS if name in fields)


def merge_request_defaults(
    body: dict[str, Any], defaults: RequestDefaults | None, *, chat: bool = True
) -> dict[str, Any]:
    """The client's body with the member's defaults merged under it (see the module docstring).

    Returns a new dict; ``body`` is not modified. ``chat`` = a chat-completions body (the only kind
    that gets the default system message).
    """
    if defaults is None:
        return dict(body)
    merged = defaults.fields()
    if any(name in body for name in COMPLETION_CAP_FIELDS):
        for name in COMPLETION_CAP_FIELDS:
            merged.pop(name, None)
    merged.update(body)
    messages = body.get("messages")
    if chat and defaults.system and isinstance(messages, list) and not _has_system_message(messages):
        merged["messages"] = [{"role": "system", "content": defaults.system}, *messages]
    return merged


def _has_system_message(messages: list[Any]) -> bool:
    return any(isinstance(m, dict) and m.get("role") in _SYSTEM_ROLES for m in messages)
