"""What the policy was calibrated on, and where the requests it does not cover go (config ``coverage``).

A policy's thresholds mean something only for requests like the ones it was calibrated on. A policy
calibrated on arithmetic questions, served to "hello", routes it to a member that answers with a
number; its promise says nothing about that answer. With ``coverage.otherwise`` set the gateway serves
through the policy only what it covers and sends the rest to one configured model, directly (no
cascade, tier label ``uncalibrated``):

* a request of a kind the policy has a section for (``kinds.tool_call``, ``kinds.structured_output``)
  is covered (the section was calibrated on that kind);
* another request of a kind other than ``text`` is not (the top level was calibrated on text);
* a ``text`` request is covered when its last user message holds at least ``min_numbers`` numbers
  (runs of digits), the one detector there is: what tells the demo's arithmetic questions from
  other text. ``min_numbers: 0`` covers every text request.

The detector reads one message once (a linear scan of digit runs, stopped at ``min_numbers``); it is
a rule of thumb and says so (docs/local-models.md): "What is 12 times 7?" is covered, "Name 3
colours" is not, "Write a function adding 2 numbers into 1 list" is, though no arithmetic was asked.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from policies.blackbox import content_text

UNCALIBRATED_TIER = "uncalibrated"
_NUMBER = re.compile(r"\d+")


class CoverageConfig(BaseModel):
    """Config section ``coverage`` (docs/contracts.md#config): what the served policy covers.

    Off (the policy serves every cascade request) while ``otherwise`` is None, the default.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_numbers: int = Field(
        0,
        ge=0,
        le=100,
        description="a text request is covered when its last user message holds this many numbers",
    )
    otherwise: str | None = Field(
        None, min_length=1, description="the configured model that answers requests the policy does not cover"
    )


def covered(coverage: CoverageConfig, body: Mapping[str, Any], kind: str, sections: Collection[str]) -> bool:
    """Whether a chat ``body`` of ``kind`` is covered by a policy whose kind sections are ``sections``
    (their kinds; see above)."""
    if kind in sections:
        return True
    if kind != "text":
        return False
    if coverage.min_numbers == 0:
        return True
    for found, _ in enumerate(_NUMBER.finditer(last_user_text(body)), start=1):
        if found >= coverage.min_numbers:
            return True
    return False


def last_user_text(body: Mapping[str, Any]) -> str:
    """The text of the last ``user`` message of a chat body (a legacy ``prompt`` string otherwise)."""
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, Mapping) and message.get("role") == "user":
                return content_text(message.get("content"))
        return ""
    prompt = body.get("prompt")
    return prompt if isinstance(prompt, str) else ""
